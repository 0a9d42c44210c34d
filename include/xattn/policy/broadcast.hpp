#pragma once
// A tensor of rank <= 4 (mask, bias, lengths...) broadcast NumPy-style, right-aligned, against the
// score matrix (B, Sq, Skv) or (B, H, Sq, Skv); broadcast axes get stride 0, so reads are O(1).
#include "../detail/format.hpp"
#include "problem.hpp"

#include <xtensor/xarray.hpp>
#include <xtensor/xutils.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace xattn {

/// Any-rank view of caller memory (or owned storage when given a temporary).
template <class T>
struct nd_ref {
  const T* data = nullptr;
  std::vector<std::size_t> shape;
  std::vector<std::ptrdiff_t> strides;
  std::shared_ptr<const void> owned;
};

template <class T, class E>
nd_ref<T> make_nd_ref(E&& x) {
  using D = std::decay_t<E>;
  nd_ref<T> r;
  auto fill = [&r](const auto& a) {
    r.data = a.data() + a.data_offset();
    r.shape.assign(a.shape().begin(), a.shape().end());
    r.strides.assign(a.strides().begin(), a.strides().end());
  };
  if constexpr (xt::has_data_interface<D>::value && std::is_lvalue_reference_v<E> &&
                std::is_same_v<std::remove_cv_t<typename D::value_type>, T>) {
    fill(x);
  } else {
    auto own = std::make_shared<xt::xarray<T>>(std::forward<E>(x));
    fill(*own);
    r.owned = own;
  }
  return r;
}

/// nd_ref bound to the problem's 4-D (B, H, Sq, Skv) index space.
template <class T>
struct bcast4 {
  const T* data = nullptr;
  std::array<std::ptrdiff_t, 4> strides{};
  std::shared_ptr<const void> owned;

  T operator()(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const noexcept {
    return data[std::ptrdiff_t(b) * strides[0] + std::ptrdiff_t(h) * strides[1] + std::ptrdiff_t(i) * strides[2] +
                std::ptrdiff_t(j) * strides[3]];
  }
  std::ptrdiff_t key_stride() const noexcept { return strides[3]; }
  const T* row(std::size_t b, std::size_t h, std::size_t i) const noexcept {
    return data + std::ptrdiff_t(b) * strides[0] + std::ptrdiff_t(h) * strides[1] + std::ptrdiff_t(i) * strides[2];
  }
};

/// Broadcast `t` against the scores of `pr`; `what` names the argument in the error.
template <class T>
bcast4<T> broadcast_to_scores(const nd_ref<T>& t, const problem& pr, const char* what) {
  const auto target = pr.score_shape();
  const std::size_t r = t.shape.size();
  auto bad = [&] {
    detail::fail(what, ": shape ", detail::shape_str(t.shape), " does not broadcast to the scores ",
                 detail::shape_str(target), " (right-aligned: each axis must match or be 1)");
  };
  if (r == 0 || r > target.size()) bad();
  // target axis a (of target.size()) maps to tensor axis a - (target.size() - r)
  std::array<std::ptrdiff_t, 4> st{};
  const std::size_t off = target.size() - r;
  for (std::size_t a = 0; a < target.size(); ++a) {
    std::ptrdiff_t s = 0;
    if (a >= off) {
      const std::size_t n = t.shape[a - off];
      if (n == target[a])
        s = n == 1 ? 0 : t.strides[a - off];
      else if (n != 1)
        bad();
    }
    // rank-3 scores (B, Sq, Skv) have no head axis: the 4-D head stride stays 0
    const std::size_t axis4 = target.size() == 3 ? (a == 0 ? 0 : a + 1) : a;
    st[axis4] = s;
  }
  return {t.data, st, t.owned};
}

}  // namespace xattn
