#pragma once
// Masks in the fused pass: a whole block is classified first (skip it, run it without mask code,
// or evaluate the masks), and only partial blocks pay per-element mask work.
//
// Semantics when several masks apply: a key hidden by any excluding mask (fill -inf) is excluded;
// otherwise a key hidden by a filling mask (e.g. d2l's -1e6) takes the fill of the outermost one.
#include "../../hana.hpp"
#include "../../policy/concepts.hpp"
#include "../../policy/masks/fill.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

namespace xattn {

namespace hana = boost::hana;

template <class M>
double fill_of(const M& m) {
  if constexpr (has_fill<M>)
    return double(m.fill());
  else
    return -std::numeric_limits<double>::infinity();
}

template <class M>
block classify_one(const M& m, std::size_t b, std::size_t h, std::size_t i0, std::size_t i1, std::size_t j0,
                   std::size_t j1) {
  if constexpr (has_classify<M>)
    return m.classify(b, h, i0, i1, j0, j1);
  else
    return block::partial;
}

struct block_verdict {
  bool skip = false;                                           // an excluding mask hides the whole block
  bool all_visible = true;                                     // no mask hides anything: no mask code needed
  bool fill_hidden = false;                                    // a filling mask hides the whole block
  double fill_max = -std::numeric_limits<double>::infinity();  // highest fill any mask can put in it
};

template <class Masks>
block_verdict classify_block(const Masks& masks, std::size_t b, std::size_t h, std::size_t i0, std::size_t i1,
                             std::size_t j0, std::size_t j1) {
  block_verdict v;
  hana::for_each(masks, [&](const auto& m) {
    const block c = classify_one(m, b, h, i0, i1, j0, j1);
    if (c == block::visible) return;
    v.all_visible = false;
    const double f = fill_of(m);
    if (std::isinf(f)) {
      v.skip |= c == block::hidden;
    } else {
      v.fill_hidden |= c == block::hidden;
      v.fill_max = std::max(v.fill_max, f);  // a partially hiding outer mask may fill higher
    }
  });
  return v;
}

/// Final score of key j given its pre-mask score s, under the semantics above.
template <class Masks, class U>
U masked_score(const Masks& masks, U s, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
  bool excluded = false, filled = false;
  U fill = 0;
  hana::for_each(masks, [&](const auto& m) {
    if (m.visible(b, h, i, j)) return;
    const double f = fill_of(m);
    if (std::isinf(f)) {
      excluded = true;
    } else {
      filled = true;
      fill = U(f);
    }
  });
  return excluded ? -std::numeric_limits<U>::infinity() : filled ? fill : s;
}

/// Columns of block [j0, j0 + cols) that any of rows [i0, i1) can see, as a count from j0: keys
/// past every row's excluding span add exactly nothing, so a partial block (the causal diagonal)
/// need not compute them. Only excluding masks with row_span trim; any other mask hides more, never
/// less, and filled keys still take part with their fill.
template <class Masks>
std::size_t visible_cols(const Masks& masks, std::size_t b, std::size_t h, std::size_t i0, std::size_t i1,
                         std::size_t j0, std::size_t cols) {
  constexpr bool any_span = decltype(hana::any_of(
      masks, [](const auto& m) { return hana::bool_c<has_row_span<std::decay_t<decltype(m)>>>; }))::value;
  if constexpr (any_span) {
    std::int64_t hi = std::numeric_limits<std::int64_t>::min();
    bool trimmed = false;
    for (std::size_t i = i0; i < i1; ++i) {
      std::int64_t row_hi = std::numeric_limits<std::int64_t>::max();
      hana::for_each(masks, [&](const auto& m) {
        if constexpr (has_row_span<std::decay_t<decltype(m)>>)
          if (std::isinf(fill_of(m))) row_hi = std::min(row_hi, m.row_span(b, h, i).second), trimmed = true;
      });
      hi = std::max(hi, row_hi);
    }
    if (!trimmed) return cols;
    return std::size_t(std::clamp<std::int64_t>(hi - std::int64_t(j0), 0, std::int64_t(cols)));
  } else {
    return cols;
  }
}

/// Rows [first, last) of the block [i0, i0 + rows) x [j0, j1) that no excluding mask hides
/// entirely, found by classifying groups of `group` rows: the rows outside see nothing in the
/// block and add exactly nothing (the causal diagonal's upper rows, the rows of another document),
/// so the kernel leaves them out. Without any classify, all rows.
template <class Masks>
std::pair<std::size_t, std::size_t> visible_rows(const Masks& masks, std::size_t b, std::size_t h, std::size_t i0,
                                                 std::size_t rows, std::size_t j0, std::size_t j1, std::size_t group) {
  constexpr bool any_classify = decltype(hana::any_of(
      masks, [](const auto& m) { return hana::bool_c<has_classify<std::decay_t<decltype(m)>>>; }))::value;
  if constexpr (!any_classify) {
    return {0, rows};
  } else {
    auto hidden = [&](std::size_t r) {
      return classify_block(masks, b, h, i0 + r, i0 + std::min(rows, r + group), j0, j1).skip;
    };
    std::size_t first = 0, last = rows;
    while (first < rows && hidden(first)) first += group;
    if (first >= rows) return {0, 0};
    while (last > first && hidden((last - 1) / group * group)) last = (last - 1) / group * group;
    return {first, last};
  }
}

/// One mask on one score row: s[c] = value where the mask hides key j0 + c, by the mask's own row
/// member (hide_row), by its span (row_span), or element by element (visible).
template <class M, class T>
void hide_one(const M& m, T* s, std::size_t cols, std::size_t b, std::size_t h, std::size_t i, std::size_t j0,
              T value) {
  if constexpr (has_hide_row<M, T>)
    m.hide_row(s, cols, b, h, i, j0, value);
  else if constexpr (has_row_span<M>)
    fill_outside(s, cols, j0, m.row_span(b, h, i), value);
  else
    for (std::size_t c = 0; c < cols; ++c)
      if (!m.visible(b, h, i, j0 + c)) s[c] = value;
}

/// Masks on one score row of a partial block: fills in order (the outermost wins), then exclusions
/// (which win over every fill) -- the semantics of masked_score.
template <class Masks, class T>
void apply_masks(const Masks& masks, T* s, std::size_t cols, std::size_t b, std::size_t h, std::size_t i,
                 std::size_t j0) {
  hana::for_each(masks, [&](const auto& m) {
    if (const double f = fill_of(m); !std::isinf(f)) hide_one(m, s, cols, b, h, i, j0, T(f));
  });
  hana::for_each(masks, [&](const auto& m) {
    if (std::isinf(fill_of(m))) hide_one(m, s, cols, b, h, i, j0, -std::numeric_limits<T>::infinity());
  });
}

}  // namespace xattn
