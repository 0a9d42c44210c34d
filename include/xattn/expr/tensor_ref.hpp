#pragma once
// Terminals: ref(x) wraps caller memory (an xtensor container, adaptor or strided view, or a raw
// pointer with strides) as a 4-D (B, H, S, D) strided view without copying. Rank-3 (B, S, D) data
// is one head; heads(x, H) reads packed (B, S, H*D) data as H heads in place. The terminal
// remembers how it was handed in (its form), so results come back in the same one.
#include "../error.hpp"
#include "../form.hpp"
#include "../types.hpp"
#include "base.hpp"

#include <xtensor/xarray.hpp>
#include <xtensor/xexpression.hpp>
#include <xtensor/xutils.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <type_traits>

namespace xattn {

/// A terminal holding elements of storage type T. Rank is the user's rank (3 or 4), or 0 when
/// only known at run time (xt::xarray); Packed marks heads(x, H) data, whose weights come back with
/// an explicit head axis.
template <class T, std::size_t Rank, bool Packed = false>
struct tensor_ref : expr_base<tensor_ref<T, Rank, Packed>> {
  static_assert(is_element_v<T>,
                "xattn: attention operands must hold float, double, xattn::bfloat16 or xattn::float16");
  using value_type = T;
  static constexpr std::size_t rank = Rank;
  static constexpr bool packed = Packed;

  strided_view<const T> view;
  form how = form::bhsd;
  std::shared_ptr<const void> owned;  // set when ref() had to evaluate or take ownership

  /// The shape as the user sees it (for error messages and results).
  std::vector<std::size_t> user_shape() const { return in_form(how, view.at.shape).user_shape; }
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
strided_view<const T> view_of(const E& x, const char* what) {
  const auto& sh = x.shape();
  const auto& st = x.strides();
  strided_view<const T> v;
  v.data = x.data() + x.data_offset();
  if (sh.size() == 3) {
    v.at = {{sh[0], 1, sh[1], sh[2]}, {std::ptrdiff_t(st[0]), 0, std::ptrdiff_t(st[1]), std::ptrdiff_t(st[2])}};
  } else if (sh.size() == 4) {
    for (std::size_t i = 0; i < 4; ++i) v.at.shape[i] = sh[i], v.at.stride[i] = std::ptrdiff_t(st[i]);
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
  static_assert(is_element_v<T>, "xattn: ref() needs a tensor of float, double, xattn::bfloat16 or xattn::float16");
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
  t.how = three ? form::bsd : form::bhsd;
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
requires(!std::is_lvalue_reference_v<E>) auto ref(E&& x) { return detail::make_ref(std::move(x)); }

/// Packed (B, S, H*D) data seen as H heads of size D, in place.
template <class E>
auto heads(E&& x, std::size_t num_heads) {
  auto t = ref(std::forward<E>(x));
  auto& at = t.view.at;
  if (t.how != form::bsd)
    fail("heads(x, ", num_heads, "): x must have rank 3 (batch, seq, heads*dim), got shape ",
         shape_str(t.user_shape()));
  if (num_heads == 0 || at.shape[3] % num_heads != 0)
    fail("heads(x, ", num_heads, "): the last axis of x ", shape_str(t.user_shape()), " is not divisible by ",
         num_heads, " heads");
  const std::size_t d = at.shape[3] / num_heads;
  at = {{at.shape[0], num_heads, at.shape[2], d},
        {at.stride[0], std::ptrdiff_t(d) * at.stride[3], at.stride[2], at.stride[3]}};
  return tensor_ref<typename decltype(t)::value_type, 3, true>{{}, t.view, form::packed, t.owned};
}

/// Caller memory as a (B, H, S, D) view with element strides; no copy, no ownership.
template <class T>
tensor_ref<std::remove_cv_t<T>, 4> ref(const T* data, std::array<std::size_t, 4> shape,
                                       std::array<std::ptrdiff_t, 4> strides) {
  tensor_ref<std::remove_cv_t<T>, 4> t;
  t.view = {data, {shape, strides}};
  t.how = form::bhsd;
  return t;
}

template <class E>
inline constexpr bool is_terminal_v = false;
template <class T, std::size_t R, bool P>
inline constexpr bool is_terminal_v<tensor_ref<T, R, P>> = true;

/// Terminals over a kv_cache's sequences (cache/cache_ref.hpp), whose keys end at each sequence's length.
template <class E>
inline constexpr bool is_cache_terminal_v = false;

}  // namespace xattn
