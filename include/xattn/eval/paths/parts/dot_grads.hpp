#pragma once
// The backward's tiles of a score that is a product of rows, S = Q·Kᵀ (the operands themselves or
// a policy's features), for the paths that score by the microkernels. Per key block, the keys
// packed twice: into a panel for S = Q·Kᵀ (qk_tile) and into strips for dQ += dS·K
// (pv_tile_strips); per query block, the query rows (in place or converted) and, for dK += dSᵀ·Q,
// in strips (pv_tile_transposed_strips, a strip at a time).
#include "../../../kernel/aligned.hpp"
#include "../../../kernel/pack.hpp"
#include "../../../kernel/pv.hpp"
#include "../../../kernel/qk.hpp"
#include "../../../layout.hpp"
#include "../../../round_up.hpp"
#include "../../operands/head_rows.hpp"
#include "../../operands/tile_rows.hpp"
#include "../../plan/schedule.hpp"

#include <algorithm>
#include <utility>

namespace xattn {

/// o += Pᵀ·X of a tile (P: cols keys x rows, ldp apart, read transposed; X: the tile's rows packed by
/// pack_strips, strip_stride apart; o: a row per key, ldo wide), one strip of X's columns at a time:
/// the strip then serves every register block of keys from L1. keys(k, R): the rows key rows
/// [k, k + R) read (key_ranges::keys).
template <class Acc, class KeyRange = kernel::every_column>
void transposed_by_strips(const Acc* p, std::size_t ldp, std::size_t cols, const Acc* x, std::size_t strip_stride,
                          std::size_t rows, Acc* o, std::size_t ldo, std::size_t width, KeyRange keys = {}) {
  constexpr std::size_t sw = kernel::strip_width<Acc>;
  for (std::size_t c = 0; c < width; c += sw)
    kernel::pv_tile_transposed_strips(p, ldp, cols, x + c / sw * strip_stride, strip_stride, rows, o + c, ldo,
                                      std::min(sw, width - c), keys);
}

template <class Acc>
class dot_grads {
  static constexpr std::size_t sw = kernel::strip_width<Acc>;

 public:
  /// Rows of n features; blocks of the backward schedule; with_dq: whether gradients() takes dS into
  /// dQ too (the value side, dP = dO·Vᵀ and dV += Pᵀ·dO, has no dQ: key_gradient only); ldq: the
  /// distance between dQ's rows (0: the features' padded width).
  dot_grads(std::size_t n, const backward_schedule& bs, bool with_dq = true, std::size_t ldq = 0)
      : n_(n),
        np_(simd::padded<Acc>(n)),
        ldo_(ldq ? ldq : np_),
        bq_(bs.block_q),
        bk_(bs.block_k),
        with_dq_(with_dq),
        kp_(kernel::packed_kt_size<Acc>(bk_, std::max<std::size_t>(n, 1))),
        ks_(with_dq ? bk_ * round_up(np_, sw) : 0),
        q_(bq_ * np_),
        qs_(bq_ * round_up(np_, sw)),
        dk_(bk_ * np_) {}

  std::size_t width() const noexcept { return n_; }
  void begin_task() {}
  void store_parameters(Acc*) const {}

  /// Key rows [j0, j0 + cols) of head (b, hk) of view k packed, and their gradient zeroed.
  template <class View>
  void load_keys(const View& k, std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
    const auto key = rows_from(head_rows(k, b, hk), j0);
    kernel::pack_kt<Acc>(key, cols, n_, k.inner_stride(), kp_.data());
    if (with_dq_) kernel::pack_strips<Acc>(key, cols, n_, k.inner_stride(), ks_.data(), bk_ * sw);
    std::fill(dk_.begin(), dk_.end(), Acc(0));
  }

  /// Query rows [i0, i0 + rows) of head (b, h) of view q.
  template <class View>
  void load_queries(const View& q, std::size_t b, std::size_t h, std::size_t i0, std::size_t rows) {
    std::tie(q_rows_, ldq_) = tile_rows(q, b, h, i0, rows, n_, np_, q_.data());
    rows_ = rows;
  }

  /// s = Q·Kᵀ of the tile's rows (cols_padded columns), through an epilogue; register blocks outside
  /// range(r, R) are written as 0.
  template <class Range = kernel::every_column, class Epi = kernel::plain_epilogue>
  void product(std::size_t cols_padded, Acc* s, std::size_t lds, Range range = {}, const Epi& epi = {}) const {
    kernel::qk_tile(q_rows_, ldq_, rows_, kp_.data(), n_, cols_padded, s, lds, range, epi);
  }

  /// s = Q·Kᵀ of the tile's rows (the interface every product of a feature path has).
  template <class Range>
  void scores(std::size_t, std::size_t cols_padded, Acc* s, std::size_t lds, Range range) const {
    product(cols_padded, s, lds, range);
  }

  /// dK += dSᵀ·Q from the tile's dS (lds apart, cols keys).
  template <class KeyRange>
  void key_gradient(const Acc* ds, std::size_t lds, std::size_t cols, KeyRange keys_range) {
    kernel::pack_strips<Acc>(kernel::strided_rows<Acc>{q_rows_, std::ptrdiff_t(ldq_)}, rows_, n_, 1, qs_.data(),
                             bq_ * sw);
    transposed_by_strips(ds, lds, cols, qs_.data(), bq_ * sw, rows_, dk_.data(), np_, np_, keys_range);
  }

  /// dK += dSᵀ·Q and dq += dS·K from the tile's dS (lds apart, cols keys); dq's rows ldq apart.
  template <class RowRange, class KeyRange>
  void gradients(const Acc* ds, std::size_t lds, std::size_t cols, Acc* dq, RowRange rows_range, KeyRange keys_range) {
    key_gradient(ds, lds, cols, keys_range);
    kernel::pv_tile_strips(ds, lds, rows_, ks_.data(), bk_ * sw, cols, dq, ldo_, np_, rows_range);
  }

  /// The key block's gradient rows into view dk at rows [j0, j0 + cols) of head (b, hk).
  void store_keys(const strided_view<Acc>& dk, std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) const {
    for (std::size_t c = 0; c < cols; ++c)
      kernel::scaled_copy(dk_.data() + c * np_, 1, n_, Acc(1), dk.row(b, hk, j0 + c), dk.inner_stride());
  }

 private:
  std::size_t n_, np_, ldo_, bq_, bk_;
  bool with_dq_;
  kernel::aligned_vector<Acc> kp_;  // the key block as a panel, for S
  kernel::aligned_vector<Acc> ks_;  // the key block in strips, for dQ
  kernel::aligned_vector<Acc> q_;   // the query rows, when not read in place
  kernel::aligned_vector<Acc> qs_;  // the query rows in strips, for dK
  kernel::aligned_vector<Acc> dk_;  // the key block's gradient
  const Acc* q_rows_ = nullptr;
  std::size_t ldq_ = 0, rows_ = 0;
};

}  // namespace xattn
