#pragma once
// Results come back in the layout the queries were handed in: (B, Sq, Dv), (B, H, Sq, Dv), or
// packed (B, Sq, H*Dv). Weights and scores are (B, Sq, Skv) or (B, H, Sq, Skv).
#include "../expr/tensor_ref.hpp"
#include "../policy/problem.hpp"

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include <type_traits>
#include <vector>

namespace xattn {

template <class T, std::size_t Rank>
using result_t = std::conditional_t<Rank == 0, xt::xarray<T>, xt::xtensor<T, Rank == 0 ? 1 : Rank>>;

template <class R>
R allocate(const std::vector<std::size_t>& shape) {
  if constexpr (std::is_same_v<R, xt::xarray<typename R::value_type>>) {
    return R::from_shape(shape);
  } else {
    typename R::shape_type s;
    std::copy(shape.begin(), shape.end(), s.begin());
    return R::from_shape(s);
  }
}

/// Shape of an output with `last` as the last axis (Dv for outputs, Skv for weights).
inline std::vector<std::size_t> user_shape(layout how, const problem& pr, std::size_t last) {
  switch (how) {
    case layout::bsd: return {pr.batch, pr.q_len, last};
    case layout::packed: return {pr.batch, pr.q_len, pr.q_heads * last};
    default: return {pr.batch, pr.q_heads, pr.q_len, last};
  }
}

/// A (B, H, S, last) view over a result laid out as `how`.
template <class T, class R>
strided4<T> view4(R& r, layout how, const problem& pr, std::size_t last) {
  strided4<T> v;
  v.data = r.data();
  const std::ptrdiff_t n = std::ptrdiff_t(last), sq = std::ptrdiff_t(pr.q_len), h = std::ptrdiff_t(pr.q_heads);
  v.shape = {pr.batch, pr.q_heads, pr.q_len, last};
  switch (how) {
    case layout::bsd: v.strides = {sq * n, 0, n, 1}; break;
    case layout::packed: v.strides = {sq * h * n, n, h * n, 1}; break;
    default: v.strides = {h * sq * n, sq * n, n, 1}; break;
  }
  return v;
}

}  // namespace xattn
