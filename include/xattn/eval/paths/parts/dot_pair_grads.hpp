#pragma once
// dot_grads on vdpbf16ps: the backward's products of rows with bf16 operands and fp32 sums, as
// PyTorch's CPU flash backward does. Operands are rounded to bf16 once (bfloat16 rows are copied
// as they are): per key block the keys into a panel of feature pairs for S = Q·Kᵀ and into key
// pairs for dQ += dS·K; per query block the query rows for S and in row pairs for dK += dSᵀ·Q.
// dS (and P, on the value side) is rounded to bf16 for the products it enters: row by row for dQ,
// and interleaved by pairs of its rows for dK (dV), which pv_tile_strips on pair tiles reads
// transposed where it lies; every sum, dQ and dK stay fp32.
#include "../../../kernel/aligned.hpp"
#include "../../../kernel/dpbf16.hpp"
#include "../../../kernel/rows.hpp"
#include "../../../layout.hpp"
#include "../../../round_up.hpp"
#include "../../plan/schedule.hpp"

#include <algorithm>
#include <type_traits>

namespace xattn {

/// Acc: float (a template, so that only a build with vdpbf16ps instantiates it).
template <class Acc = float>
class dot_pair_grads {
  static_assert(std::is_same_v<Acc, float>, "xattn: the bf16 products sum in float");

 public:
  /// Rows of n features; blocks of the backward schedule; with_dq as dot_grads'.
  dot_pair_grads(std::size_t n, const backward_schedule& bs, bool with_dq = true)
      : n_(n),
        ldq_(round_up(std::max<std::size_t>(n, 1), 2)),
        np_(simd::padded<float>(n)),
        bq_(bs.block_q),
        bk_(bs.block_k),
        lds16_(round_up(bk_, 32)),
        with_dq_(with_dq),
        kt_(kernel::packed_pairs_size(bk_, std::max<std::size_t>(n, 1))),
        kv_(with_dq ? round_up(bk_, 2) * np_ : 0),
        q16_(bq_ * ldq_, bfloat16::from_bits(0)),
        qp_(round_up(bq_, 2) * np_),
        dst_(round_up(bq_, 2) * 2 * round_up(bk_, 16)),
        ds16_(with_dq ? bq_ * lds16_ : 0),
        dk_(bk_ * np_) {}

  std::size_t width() const noexcept { return n_; }

  /// Key rows [j0, j0 + cols) of head (b, hk) of view k packed, and their gradient zeroed.
  template <class View>
  void load_keys(const View& k, std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
    const auto key = [&](std::size_t c) { return k.row(b, hk, j0 + c); };
    kernel::pack_kt(key, cols, n_, k.inner_stride(), kernel::in_pairs(kt_.data()));
    if (with_dq_) kernel::pack_strips(key, cols, n_, k.inner_stride(), kernel::in_pairs(kv_.data()), np_);
    std::fill(dk_.begin(), dk_.end(), 0.0f);
  }

  /// Query rows [i0, i0 + rows) of head (b, h) of view q, as bf16 rows and in row pairs.
  template <class View>
  void load_queries(const View& q, std::size_t b, std::size_t h, std::size_t i0, std::size_t rows) {
    const std::ptrdiff_t st = q.inner_stride();
    for (std::size_t r = 0; r < rows; ++r) kernel::round_to_bf16(q.row(b, h, i0 + r), st, n_, q16_.data() + r * ldq_);
    kernel::pack_strips([&](std::size_t r) { return q.row(b, h, i0 + r); }, rows, n_, st, kernel::in_pairs(qp_.data()),
                        np_);
    rows_ = rows;
  }

  /// s = Q·Kᵀ of the tile's rows (cols_padded columns, a multiple of 16) through an epilogue.
  /// Every register block is computed: the range only saves work in dot_grads.
  template <class Range = kernel::every_column, class Epi = kernel::plain_epilogue>
  void product(std::size_t cols_padded, float* s, std::size_t lds, Range = {}, const Epi& epi = {}) const {
    kernel::qk_tile(q16_.data(), ldq_, rows_, kernel::in_pairs(kt_.data()), n_, cols_padded, 1.0f, s, lds, epi);
  }

  /// dK += dSᵀ·Q from the tile's dS (lds apart, cols keys; zero from cols to the next multiple
  /// of 16).
  template <class KeyRange>
  void key_gradient(const float* ds, std::size_t lds, std::size_t cols, KeyRange) {
    // key j's pair t (dS of rows 2t and 2t + 1) at 2j + t·ldt
    const std::size_t cols16 = round_up(cols, 16), ldt = 2 * cols16;
    kernel::pack_strips([&](std::size_t r) { return ds + r * lds; }, rows_, cols, 1, kernel::in_pairs(dst_.data()),
                        cols16);
    kernel::pv_tile_strips(kernel::in_pairs(dst_.data()), 2, static_cast<const float*>(nullptr), 0, cols,
                           kernel::in_pairs(qp_.data()), rows_, dk_.data(), np_, np_, ldt);
  }

  /// dK += dSᵀ·Q and dq += dS·K from the tile's dS; dq's rows np apart.
  template <class RowRange, class KeyRange>
  void gradients(const float* ds, std::size_t lds, std::size_t cols, float* dq, RowRange, KeyRange keys_range) {
    key_gradient(ds, lds, cols, keys_range);
    const std::size_t colsp = round_up(cols, 16);
    for (std::size_t r = 0; r < rows_; ++r) kernel::round_row_bf16(ds + r * lds, colsp, ds16_.data() + r * lds16_);
    kernel::pv_tile_strips(kernel::in_pairs(ds16_.data()), lds16_, ds, lds, rows_, kernel::in_pairs(kv_.data()), cols,
                           dq, np_, np_);
  }

  /// The key block's gradient rows into view dk at rows [j0, j0 + cols) of head (b, hk).
  void store_keys(const strided_view<float>& dk, std::size_t b, std::size_t hk, std::size_t j0,
                  std::size_t cols) const {
    for (std::size_t c = 0; c < cols; ++c)
      kernel::scaled_copy(dk_.data() + c * np_, 1, n_, 1.0f, dk.row(b, hk, j0 + c), dk.inner_stride());
  }

 private:
  std::size_t n_, ldq_, np_, bq_, bk_, lds16_;
  bool with_dq_;
  kernel::aligned_vector<bfloat16> kt_;    // the key block as a pair panel, for S
  kernel::aligned_vector<bfloat16> kv_;    // the key block in key pairs, for dQ
  kernel::aligned_vector<bfloat16> q16_;   // the query rows, for S
  kernel::aligned_vector<bfloat16> qp_;    // the query rows in row pairs, for dK
  kernel::aligned_vector<bfloat16> dst_;   // dS interleaved by pairs of rows, for dK
  kernel::aligned_vector<bfloat16> ds16_;  // dS rounded, for dQ
  kernel::aligned_vector<float> dk_;       // the key block's gradient
  std::size_t rows_ = 0;
};

}  // namespace xattn
