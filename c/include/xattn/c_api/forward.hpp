#pragma once
// The C interface's forward: the expression with_attention builds (or another builder's), run by
// the C++ DSL's own fused pass on the caller's memory, with the output in the inputs' type or float.
#include "expression.hpp"

#include <type_traits>
#include <vector>

namespace xattn::c_api {

namespace detail {

template <class Acc, class E, class O>
void write(const forward_args& a, const E& e, O* out) {
  if (a.lse != nullptr) {
    eval_with_lse_into(e, out, a.out.shape, a.out.strides, static_cast<Acc*>(a.lse), a.lse_shape, a.lse_strides, a.sch);
  } else {
    // the log-sum-exp is computed anyway; a scratch row of it costs nothing next to the pass
    const std::array<std::size_t, 3> shape{a.out.shape[0], a.out.shape[1], a.out.shape[2]};
    std::vector<Acc> scratch(shape[0] * shape[1] * shape[2]);
    const std::array<std::ptrdiff_t, 3> strides{std::ptrdiff_t(shape[1] * shape[2]), std::ptrdiff_t(shape[2]), 1};
    eval_with_lse_into(e, out, a.out.shape, a.out.strides, scratch.data(), shape, strides, a.sch);
  }
}

}  // namespace detail

/// The forward of the expression build(a, Q, K, V, f) hands to f, on inputs of element type T.
template <class T, class Build>
void forward_with(const forward_args& a, Build&& build) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const auto Q = ref(static_cast<const T*>(a.q.data), a.q.shape, a.q.strides);
  const auto K = ref(static_cast<const T*>(a.k.data), a.k.shape, a.k.strides);
  const auto V = ref(static_cast<const T*>(a.v.data), a.v.shape, a.v.strides);
  build(a, Q, K, V, [&](const auto& e) {
    if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>)  // 16-bit: out in T or float
      if (a.out_dtype == XATTN_F32) return detail::write<Acc>(a, e, static_cast<float*>(a.out.data));
    detail::write<Acc>(a, e, static_cast<T*>(a.out.data));
  });
}

template <class T>
void forward_as(const forward_args& a) {
  forward_with<T>(a, [](const auto&... x) { with_attention(x...); });
}

}  // namespace xattn::c_api
