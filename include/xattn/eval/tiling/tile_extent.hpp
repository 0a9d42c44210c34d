#pragma once
// Which part of a (query block x key block) tile takes part under the masks, for the forward and
// the backward alike: the tile is skipped when a mask hides all of it, trimmed to the keys some
// row can see and to the rows that see some key, and, where a mask hides only part of it, each
// row's range of keys that are not excluded (the products then skip the register blocks only
// excluded keys reach: on the causal diagonal, half the tile).
#include "../../kernel/blocking.hpp"
#include "mask_eval.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>
#include <vector>

namespace xattn {

/// The part of tile [i0, i0 + rows) x [j0, j0 + cols) that takes part: keys [j0, j0 + cols) for
/// tile rows [r0, r1). cols 0: the tile adds exactly nothing.
struct tile_extent {
  std::size_t cols = 0, r0 = 0, r1 = 0;
  bool all_visible = true;  // no mask hides anything in it: no mask code needed
};

/// The extent of tile [i0, i0 + rows) x [j0, j0 + all) of head (b, h). Rows are trimmed in groups
/// of `group` (the microkernel's register rows). skip_filled(fill_max) says whether a tile that a
/// filling mask hides entirely adds nothing (the forward knows from its running maxima).
template <class Masks, class SkipFilled>
tile_extent extent_of(const Masks& masks, std::size_t b, std::size_t h, std::size_t i0, std::size_t rows,
                      std::size_t j0, std::size_t all, std::size_t group, SkipFilled&& skip_filled) {
  const block_verdict v = classify_block(masks, b, h, i0, i0 + rows, j0, j0 + all);
  if (v.skip || (v.fill_hidden && skip_filled(v.fill_max))) return {};
  if (v.all_visible) return {all, 0, rows, true};
  const std::size_t cols = visible_cols(masks, b, h, i0, i0 + rows, j0, all);
  if (cols == 0) return {};
  const auto [r0, r1] = visible_rows(masks, b, h, i0, rows, j0, j0 + cols, group);
  if (r0 == r1) return {};
  return {cols, r0, r1, false};
}

/// Per row of a tile some mask hides part of: which keys are visible (NaN where visible, else the
/// mask's fill or -inf) and the keys [lo, hi) outside which its weights are 0 (excluded). Gives the
/// tile products their ranges: rows(r, R), for products whose rows are query rows, the keys that
/// rows [r, r + R) do not exclude; keys(k, R), for products whose rows are keys, the query rows
/// that do not exclude every key of [k, k + R).
template <class T>
class key_ranges {
 public:
  key_ranges() = default;
  key_ranges(std::size_t rows, std::size_t lds) : lds_(lds), vis_(rows * lds), lo_(rows), hi_(rows) {}

  /// A tile no mask hides anything in.
  void whole(std::size_t rows) noexcept {
    ranged_ = false;
    rows_ = rows;
  }

  /// Rows [i0, i0 + rows) x keys [j0, j0 + cols) of head (b, h) under the masks.
  template <class Masks>
  void find(const Masks& masks, std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t j0,
            std::size_t cols) {
    ranged_ = true;
    rows_ = rows;
    for (std::size_t r = 0; r < rows; ++r) {
      T* vis = vis_.data() + r * lds_;
      std::fill(vis, vis + cols, std::numeric_limits<T>::quiet_NaN());
      apply_masks(masks, vis, cols, b, h, i0 + r, j0);
      std::size_t lo = cols, hi = 0;
      for (std::size_t c = 0; c < cols; ++c)
        if (vis[c] != -std::numeric_limits<T>::infinity()) lo = std::min(lo, c), hi = c + 1;
      lo_[r] = std::min(lo, hi), hi_[r] = hi;
    }
  }

  bool ranged() const noexcept { return ranged_; }
  /// Whether key c of row r is hidden (filled or excluded): its score is a constant.
  bool hidden(std::size_t r, std::size_t c) const noexcept { return !std::isnan(vis_[r * lds_ + c]); }

  kernel::keys_seen rows() const noexcept { return {lo_.data(), hi_.data(), ranged_}; }
  kernel::rows_seeing keys() const noexcept { return {lo_.data(), hi_.data(), rows_, ranged_}; }

 private:
  std::size_t lds_ = 0, rows_ = 0;
  bool ranged_ = false;
  std::vector<T> vis_;
  std::vector<std::size_t> lo_, hi_;
};

}  // namespace xattn
