#pragma once
// select(K, idx) and select(V, idx): each query attends only the keys an indexer chose for it
// (top-k sparse attention, DeepSeek's sparse attention), read where they lie. idx is (B, Hkv, Sq, k)
// -- query i of key head h reads keys idx(b, h, i, 0..k) -- and a negative index is no key (a
// shorter list padded with -1). The terminal is a view of k rows per query: row t of head h is row
// idx(b, h, i, t) of the tensor or cache selected from, for the query i the pass is computing
// (the evaluator runs one query position at a time over it: forward/selected.hpp).
#include "../error.hpp"
#include "../layout.hpp"
#include "base.hpp"
#include "tensor_ref.hpp"

#include <xtensor/xtensor.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

namespace xattn {

/// The rows of head (b, h) of a selected view for its query, from column c0 on: row j is the
/// selected row j0 + j (an accessor for the tile operations, as a cache's paged_rows).
template <class View>
struct selected_rows {
  using element = std::remove_cv_t<std::remove_pointer_t<decltype(std::declval<const View&>().data)>>;
  const View* v;
  std::size_t b, h, j0 = 0, c0 = 0;
  auto operator()(std::size_t j) const noexcept { return v->row(b, h, j0 + j) + c0; }
  selected_rows at(std::size_t j, std::size_t c) const noexcept { return {v, b, h, j0 + j, c0 + c}; }
};

template <class View, class I>
struct selected_view {
  View base;                     // the rows selected from, (B, H, Skv, D)
  strided_view<const I, 4> idx;  // (B, H, Sq, k)
  std::size_t i = 0;             // the query whose rows these are (set by the evaluator for each pass)
  layout<4> at;                  // (B, H, k, D); strides: the base's
  decltype(base.data) data = nullptr;

  /// The row selected as t for head (b, h): a negative index (no key) reads row 0, which the
  /// selection's mask hides.
  std::size_t key(std::size_t b, std::size_t h, std::size_t t) const noexcept {
    const I j = idx(b, h, i, t);
    return j < 0 ? 0 : std::size_t(j);
  }
  auto row(std::size_t b, std::size_t h, std::size_t t) const noexcept {
    auto r = base.row(b, h, key(b, h, t));
    if constexpr (requires { r.scattered; }) r.scattered = true;  // int8 keys: never read as a page's block
    return r;
  }
  selected_rows<selected_view> rows(std::size_t b, std::size_t h) const noexcept { return {this, b, h}; }
  decltype(auto) operator()(std::size_t b, std::size_t h, std::size_t t, std::size_t d) const noexcept {
    return base(b, h, key(b, h, t), d);
  }
  std::ptrdiff_t inner_stride() const noexcept { return base.inner_stride(); }
  bool rows_contiguous() const noexcept { return base.rows_contiguous(); }
  bool overlaps(const void* lo, const void* hi) const noexcept { return base.overlaps(lo, hi); }
};

/// select(X, idx) of a terminal X of K or V.
template <class Term, class I>
struct selected_ref : expr_base<selected_ref<Term, I>> {
  using value_type = typename Term::value_type;
  using index_type = I;
  static constexpr std::size_t rank = Term::rank;
  static constexpr bool packed = Term::packed;

  selected_view<std::decay_t<decltype(std::declval<const Term&>().view)>, I> view;
  form how = form::bhsd;
  Term from;                          // the terminal selected from (its shape: errors and bounds)
  std::shared_ptr<const void> owned;  // idx, when select() was handed a temporary

  std::vector<std::size_t> user_shape() const { return in_form(how, view.at.shape).user_shape; }
};

template <class Term, class I>
inline constexpr bool is_terminal_v<selected_ref<Term, I>> = true;

template <class E>
inline constexpr bool is_selected_terminal_v = false;
template <class Term, class I>
inline constexpr bool is_selected_terminal_v<selected_ref<Term, I>> = true;

namespace detail {

template <class T>
inline constexpr bool is_index_type_v = std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>;

}  // namespace detail

/// select(X, idx): for each query i of key head h, the rows idx(b, h, i, 0..k) of X (a ref() of
/// (B, Hkv, Skv, D) keys or values, or a cache terminal), k per query; idx an xtensor of int32 or
/// int64 of shape (B, Hkv, Sq, k), viewed in place (keep it alive while the expression is used).
template <class Term, class Idx>
auto select(const Term& x, const Idx& idx) {
  static_assert(is_terminal_v<Term> && !is_selected_terminal_v<Term>,
                "xattn: select(X, idx): X must be ref(k) or ref(v) of (B, Hkv, Skv, D) rows, or a cache's "
                "keys(batch) or values(batch)");
  using I = std::remove_cv_t<typename Idx::value_type>;
  static_assert(detail::is_index_type_v<I>,
                "xattn: select(X, idx): idx must hold std::int32_t or std::int64_t key positions");
  static_assert(xt::has_data_interface<Idx>::value,
                "xattn: select(X, idx): idx must be an xtensor container of shape (B, Hkv, Sq, k)");
  if (idx.dimension() != 4)
    fail("select(X, idx): idx must have rank 4 (batch, kv_heads, queries, k), got shape ", shape_str(idx.shape()));
  if (x.how != form::bhsd)
    fail("select(X, idx): X must be (B, Hkv, Skv, D) rows, got a ", x.how == form::bsd ? "(B, S, D)" : "heads()",
         " operand of shape ", shape_str(x.user_shape()));
  const auto& xs = x.view.at.shape;
  const auto& is = idx.shape();
  if (is[0] != xs[0] || is[1] != xs[1])
    fail("select(X, idx): idx ", shape_str(is), " must be (B, Hkv, Sq, k) for X ", shape_str(x.user_shape()),
         ": batch ", xs[0], " and ", xs[1], " key heads");
  selected_ref<Term, I> s;
  s.from = x;
  s.how = form::bhsd;
  auto& v = s.view;
  v.base = x.view;
  v.data = x.view.data;
  v.idx.data = idx.data() + idx.data_offset();
  for (std::size_t a = 0; a < 4; ++a) v.idx.at.shape[a] = is[a], v.idx.at.stride[a] = std::ptrdiff_t(idx.strides()[a]);
  v.at = {{xs[0], xs[1], is[3], xs[3]}, x.view.at.stride};
  return s;
}

}  // namespace xattn
