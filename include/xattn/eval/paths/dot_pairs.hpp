#pragma once
// Score path dot_bf16: S = Q · Kᵀ of bfloat16 queries and keys by vdpbf16ps (kernel/dpbf16.hpp),
// where the build has AVX512-BF16. Forward: keys packed into panels of feature pairs (once per
// evaluation, or per head by the thread using it); the task's queries are copied as they are, and
// the scale multiplies the fp32 sums, so no operand is rounded. When decoding, keys are read in
// place: their rows already pairs of the summed axis (kernel::qk_direct on bf16 queries), or,
// for a few query rows, widened in registers as dot_identity's. Backward: the products on vdpbf16ps too
// (parts/dot_pair_grads.hpp), dS rounded to bf16 for dQ and dK.
#include "../../expr/tensor_ref.hpp"
#include "../../kernel/aligned.hpp"
#include "../../kernel/dpbf16.hpp"
#include "../../kernel/qk.hpp"
#include "../../kernel/rows.hpp"
#include "../operands/key_panels.hpp"
#include "../plan/schedule.hpp"
#include "dot_identity.hpp"
#include "parts/dot_pair_grads.hpp"
#include "parts/row_grad_tiles.hpp"

#include <string_view>

namespace xattn {

/// Whether a dot product of Base's operands takes this path: both bfloat16, fp32 sums, and a build
/// with vdpbf16ps.
template <class Acc, class Base>
inline constexpr bool takes_bf16_pairs_v = kernel::has_dpbf16&& std::is_same_v<Acc, float>&&
    std::is_same_v<detail::value_t<decltype(std::declval<Base>().q)>, bfloat16>&&
        std::is_same_v<detail::value_t<decltype(std::declval<Base>().k)>, bfloat16>;

template <class Acc, class Base>
struct dot_pairs_path {
  using widened = dot_identity_path<Acc, Base>;
  static constexpr std::string_view name = "dot_bf16";
  static constexpr std::string_view what = "Q·Kᵀ of bfloat16 operands by vdpbf16ps (fp32 sums)";

  static path_facts facts(const Base& base, const problem& pr) { return widened::facts(base, pr); }
  static constexpr bool plain_products = widened::plain_products;
  /// Up to this many query rows per key head (one register block), decoding widens the keys: the
  /// product is not what bounds it, and vdpbf16ps on rows in place streams them from memory about
  /// 1.25x more slowly. More rows make the product count, and the pairs win.
  static constexpr std::size_t widened_rows = 4;
  static constexpr kernel::tile_op score_op(const forward_schedule& fs) {
    if (fs.keys != key_reads::in_place) return {kernel::operation::qk_tile, kernel::bf16_pairs};
    return fs.block_q <= widened_rows ? widened::score_op(fs)
                                      : kernel::tile_op{kernel::operation::qk_direct, kernel::bf16_pairs};
  }
  static constexpr kernel::tile_op key_pack_op{kernel::operation::pack_kt, kernel::bf16_pairs};
  static constexpr std::string_view key_work = widened::key_work;
  static constexpr op_list key_ops = widened::key_ops, query_ops = widened::query_ops;
  static constexpr backward_steps backward_ops{
      {},
      {key_pack_op, {kernel::operation::pack_strips, kernel::bf16_pairs}},
      {{kernel::operation::qk_tile, kernel::bf16_pairs}},
      {{kernel::operation::pack_strips, kernel::bf16_pairs}, {kernel::operation::pv_tile_strips, kernel::bf16_pairs}},
      {}};

  // ---- forward ----

  using keys = operand_panels<bf16_pairs, Base>;

  /// One per thread: the task's queries as they are, in bf16 rows (even length, the odd feature's
  /// partner zero); when decoding few rows, widened and scaled, as dot_identity's.
  class tiles {
   public:
    tiles(const Base& base, const problem& pr, const keys& k, const forward_schedule& fs)
        : base_(base),
          n_(pr.q_dim),
          ldq_(n_ + n_ % 2),
          widen_(score_op(fs).format != kernel::bf16_pairs),
          q16_(widen_ ? 0 : fs.block_q * std::max<std::size_t>(ldq_, 1), bfloat16::from_bits(0)),
          q_(widen_ ? fs.block_q * std::max<std::size_t>(n_, 1) : 0),
          reader_(k.panels, pr, n_, fs) {}

    /// Queries [i0, i0 + rows) of head h into tile rows [at, at + rows); at > 0 appends another
    /// head's rows to the block loaded at 0 (grouped-query decoding).
    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      const auto& qv = base_.q.view;
      if (at == 0) i0_ = i0;
      scale_ = scale;
      if (widen_) {
        for (std::size_t r = 0; r < rows; ++r)
          kernel::scaled_copy(qv.row(b, h, i0 + r), qv.inner_stride(), n_, scale, q_.data() + (at + r) * n_, 1);
        return;
      }
      for (std::size_t r = 0; r < rows; ++r)
        kernel::round_to_bf16(qv.row(b, h, i0 + r), qv.inner_stride(), n_, q16_.data() + (at + r) * ldq_);
    }

    /// Rows to prefetch with the keys the next scores read in place (kernel::row_prefetch).
    void prefetch_with_keys(kernel::row_prefetch also) noexcept { also_ = also; }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds) {
      const auto& kv = base_.k.view;
      if (widen_) {
        kernel::qk_direct(q_.data() + (i0 - i0_) * n_, n_, rows, rows_from(head_rows(kv, b, hk), j0), cols, n_, s, lds,
                          also_);
        return;
      }
      const bfloat16* q = q16_.data() + (i0 - i0_) * ldq_;
      const auto key = [&](std::size_t j) { return kv.row(b, hk, j); };
      if (const bfloat16* kt = reader_.panel(b, hk, j0, kv.inner_stride(), key))
        kernel::qk_tile(q, ldq_, rows, kernel::in_pairs(kt), n_, colsp, scale_, s, lds);
      else
        kernel::qk_direct(q, ldq_, rows, rows_from(head_rows(kv, b, hk), j0), cols, n_, scale_, s, lds, also_);
    }

   private:
    const Base& base_;
    std::size_t n_, ldq_, i0_ = 0;
    bool widen_;  // decoding few rows: keys read where they lie, widened
    Acc scale_ = 1;
    kernel::row_prefetch also_;
    kernel::aligned_vector<bfloat16> q16_;
    kernel::aligned_vector<Acc> q_;
    key_reader<bf16_pairs> reader_;
  };

  // ---- backward ----

  using grads = typename widened::grads;
  using grad_tiles = row_grad_tiles<Acc, grads, dot_pair_grads<Acc>>;
};

}  // namespace xattn
