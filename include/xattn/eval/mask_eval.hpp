#pragma once
// Masks in the fused pass: a whole block is classified first (skip it, run it without mask code,
// or evaluate the predicates), and only partial blocks pay per-element mask work.
//
// Semantics when several masks apply: a key hidden by any excluding mask (fill -inf) is excluded;
// otherwise a key hidden by a filling mask (e.g. d2l's -1e6) takes the fill of the outermost one.
#include "../policy/concepts.hpp"

#include <boost/hana.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace xattn {

template <class M>
double fill_of(const M& m) {
  if constexpr (decltype(caps::has_fill(m))::value)
    return double(m.fill());
  else
    return -std::numeric_limits<double>::infinity();
}

template <class M>
block classify_one(const M& m, std::size_t b, std::size_t h, std::size_t i0, std::size_t i1, std::size_t j0,
                   std::size_t j1) {
  if constexpr (decltype(caps::has_classify(m))::value)
    return m.classify(b, h, i0, i1, j0, j1);
  else
    return block::partial;
}

struct block_verdict {
  bool skip = false;         // an excluding mask hides the whole block
  bool all_visible = true;   // no mask hides anything: no mask code needed
  bool fill_hidden = false;  // a filling mask hides the whole block
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
/// need not compute them. Filling masks never trim: their keys still take part with the fill.
template <class Masks>
std::size_t visible_cols(const Masks& masks, std::size_t b, std::size_t h, std::size_t i0, std::size_t i1,
                         std::size_t j0, std::size_t cols) {
  if constexpr (decltype(hana::all_of(masks, [](const auto& m) { return caps::has_row_span(m); }))::value) {
    std::int64_t hi = std::numeric_limits<std::int64_t>::min();
    for (std::size_t i = i0; i < i1; ++i) {
      std::int64_t row_hi = std::numeric_limits<std::int64_t>::max();
      hana::for_each(masks, [&](const auto& m) {
        if (std::isinf(fill_of(m))) row_hi = std::min(row_hi, m.row_span(b, h, i).second);
      });
      hi = std::max(hi, row_hi);
    }
    return std::size_t(std::clamp<std::int64_t>(hi - std::int64_t(j0), 0, std::int64_t(cols)));
  } else {
    return cols;
  }
}

/// Fill s[c] outside the visible span [first, last) of keys j0 + c.
template <class T>
void fill_outside(T* s, std::size_t cols, std::size_t j0, std::pair<std::int64_t, std::int64_t> span, T value) {
  const auto clamp = [&](std::int64_t j) { return std::size_t(std::clamp<std::int64_t>(j - std::int64_t(j0), 0, std::int64_t(cols))); };
  const std::size_t lo = clamp(span.first), hi = std::max(lo, clamp(span.second));
  std::fill(s, s + lo, value);
  std::fill(s + hi, s + cols, value);
}

/// Masks on one score row of a partial block: interval masks (causal, window, lengths) by range
/// fills -- fills in order, then exclusions, which win -- anything else element by element.
template <class Masks, class T>
void apply_masks(const Masks& masks, T* s, std::size_t cols, std::size_t b, std::size_t h, std::size_t i,
                 std::size_t j0) {
  if constexpr (decltype(hana::all_of(masks, [](const auto& m) { return caps::has_row_span(m); }))::value) {
    hana::for_each(masks, [&](const auto& m) {
      if (const double f = fill_of(m); !std::isinf(f)) fill_outside(s, cols, j0, m.row_span(b, h, i), T(f));
    });
    hana::for_each(masks, [&](const auto& m) {
      if (std::isinf(fill_of(m))) fill_outside(s, cols, j0, m.row_span(b, h, i), -std::numeric_limits<T>::infinity());
    });
  } else {
    for (std::size_t c = 0; c < cols; ++c) s[c] = masked_score(masks, s[c], b, h, i, j0 + c);
  }
}

}  // namespace xattn
