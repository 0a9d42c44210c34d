#pragma once
// Terminals: ref(x) wraps caller memory (an xtensor container, adaptor or strided view, or a raw
// pointer with strides) as a 4-D (B, H, S, D) strided view without copying. Rank-3 (B, S, D) data
// is one head; heads(x, H) reads packed (B, S, H*D) data as H heads in place. The terminal
// remembers how it was handed in, so results come back in the same layout.
#include "../detail/format.hpp"
#include "base.hpp"

#include <xtensor/xarray.hpp>
#include <xtensor/xexpression.hpp>
#include <xtensor/xutils.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <type_traits>

namespace xattn {

/// How a terminal was handed in: (B,S,D), (B,H,S,D), or packed (B,S,H*D).
enum class layout { bsd, bhsd, packed };

template <class T>
struct strided4 {
  const T* data = nullptr;
  std::array<std::size_t, 4> shape{};       // (B, H, S, D)
  std::array<std::ptrdiff_t, 4> strides{};  // in elements

  const T* row(std::size_t b, std::size_t h, std::size_t s) const noexcept {
    return data + std::ptrdiff_t(b) * strides[0] + std::ptrdiff_t(h) * strides[1] +
           std::ptrdiff_t(s) * strides[2];
  }
  T operator()(std::size_t b, std::size_t h, std::size_t s, std::size_t d) const noexcept {
    return row(b, h, s)[std::ptrdiff_t(d) * strides[3]];
  }
  /// Result views are created by eval over storage it owns, so writing through them is sound.
  T* mutable_row(std::size_t b, std::size_t h, std::size_t s) const noexcept { return const_cast<T*>(row(b, h, s)); }
  bool rows_contiguous() const noexcept { return strides[3] == 1 || shape[3] == 1; }
  /// Whether [lo, hi) intersects the elements this view can reach.
  bool overlaps(const T* lo, const T* hi) const noexcept {
    std::ptrdiff_t first = 0, last = 0;
    for (std::size_t a = 0; a < 4; ++a) {
      if (shape[a] == 0) return false;
      const std::ptrdiff_t span = std::ptrdiff_t(shape[a] - 1) * strides[a];
      (span < 0 ? first : last) += span;
    }
    return data + first < hi && lo < data + last + 1;
  }
};

/// A terminal. Rank is the user's rank (3 or 4), or 0 when only known at run time (xt::xarray);
/// Packed marks heads(x, H) data, whose weights come back with an explicit head axis.
template <class T, std::size_t Rank, bool Packed = false>
struct tensor_ref : expr_base<tensor_ref<T, Rank, Packed>> {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "xattn: attention operands must hold float or double");
  using value_type = T;
  static constexpr std::size_t rank = Rank;
  static constexpr bool packed = Packed;

  strided4<T> view;
  layout how = layout::bhsd;
  std::shared_ptr<const void> owned;  // set when ref() had to evaluate or take ownership

  /// The shape as the user sees it (for error messages and results).
  std::vector<std::size_t> user_shape() const {
    const auto& s = view.shape;
    switch (how) {
      case layout::bsd: return {s[0], s[2], s[3]};
      case layout::packed: return {s[0], s[2], s[1] * s[3]};
      default: return {s[0], s[1], s[2], s[3]};
    }
  }
};

namespace detail {

template <class E>
using value_t = std::remove_cv_t<typename std::decay_t<E>::value_type>;

template <class E>
constexpr std::size_t static_rank() {
  constexpr std::size_t r = xt::get_rank<std::decay_t<E>>::value;
  return r == SIZE_MAX ? 0 : r;
}

template <class T, class E>
strided4<T> view_of(const E& x, const char* what) {
  const auto& sh = x.shape();
  const auto& st = x.strides();
  strided4<T> v;
  v.data = x.data() + x.data_offset();
  if (sh.size() == 3) {
    v.shape = {sh[0], 1, sh[1], sh[2]};
    v.strides = {std::ptrdiff_t(st[0]), 0, std::ptrdiff_t(st[1]), std::ptrdiff_t(st[2])};
  } else if (sh.size() == 4) {
    for (std::size_t i = 0; i < 4; ++i) {
      v.shape[i] = sh[i];
      v.strides[i] = std::ptrdiff_t(st[i]);
    }
  } else {
    fail(what, ": expected a tensor of rank 3 (batch, seq, dim) or 4 (batch, heads, seq, dim), got shape ",
         shape_str(sh));
  }
  return v;
}

}  // namespace detail

template <class E>
concept xtensor_expression = xt::is_xexpression<std::decay_t<E>>::value;

namespace detail {

template <class E>
auto make_ref(E&& x) {
  using D = std::decay_t<E>;
  using T = value_t<D>;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "xattn: ref() needs a tensor of float or double");
  constexpr std::size_t r = static_rank<D>();
  static_assert(r == 0 || r == 3 || r == 4,
                "xattn: ref() takes rank 3 (batch, seq, dim) or rank 4 (batch, heads, seq, dim) tensors");
  tensor_ref<T, r> t;
  const bool three = x.dimension() == 3;
  if constexpr (xt::has_data_interface<D>::value && std::is_lvalue_reference_v<E>) {
    t.view = view_of<T>(x, "ref()");
  } else {
    auto own = std::make_shared<xt::xarray<T>>(std::forward<E>(x));
    t.view = view_of<T>(*own, "ref()");
    t.owned = own;
  }
  t.how = three ? layout::bsd : layout::bhsd;
  return t;
}

}  // namespace detail

/// Wrap an xtensor expression as a terminal. Lvalues with a data interface are viewed in place
/// (keep them alive while the expression is used); anything else is evaluated once into owned
/// storage. (Constrained so that it, not std::ref, is chosen for xtensor arguments.)
template <xtensor_expression E>
auto ref(E& x) {
  return detail::make_ref(x);
}

template <xtensor_expression E>
  requires(!std::is_lvalue_reference_v<E>)
auto ref(E&& x) {
  return detail::make_ref(std::move(x));
}

/// Packed (B, S, H*D) data seen as H heads of size D, in place.
template <class E>
auto heads(E&& x, std::size_t num_heads) {
  auto t = ref(std::forward<E>(x));
  auto& v = t.view;
  if (t.how != layout::bsd)
    detail::fail("heads(x, ", num_heads, "): x must have rank 3 (batch, seq, heads*dim), got shape ",
                 detail::shape_str(t.user_shape()));
  if (num_heads == 0 || v.shape[3] % num_heads != 0)
    detail::fail("heads(x, ", num_heads, "): the last axis of x ", detail::shape_str(t.user_shape()),
                 " is not divisible by ", num_heads, " heads");
  const std::size_t d = v.shape[3] / num_heads;
  v.strides = {v.strides[0], std::ptrdiff_t(d) * v.strides[3], v.strides[2], v.strides[3]};
  v.shape = {v.shape[0], num_heads, v.shape[2], d};
  t.how = layout::packed;
  return tensor_ref<typename decltype(t)::value_type, 3, true>{{}, v, layout::packed, t.owned};
}

/// Caller memory as a (B, H, S, D) view with element strides; no copy, no ownership.
template <class T>
tensor_ref<T, 4> ref(const T* data, std::array<std::size_t, 4> shape, std::array<std::ptrdiff_t, 4> strides) {
  tensor_ref<std::remove_cv_t<T>, 4> t;
  t.view = {data, shape, strides};
  t.how = layout::bhsd;
  return t;
}

template <class E>
inline constexpr bool is_terminal_v = false;
template <class T, std::size_t R, bool P>
inline constexpr bool is_terminal_v<tensor_ref<T, R, P>> = true;

}  // namespace xattn
