#pragma once
// Score paths dot_rotary and dot_sum: S = Σ_t s_t · Q_t·K_tᵀ as one product of assembled rows
// (operands/assembled_rows.hpp): rope(Q) * trans(rope(K)), either side rotated, or the sum of two
// products (multi-head latent attention), each rotated or not. Forward: each key block assembled
// as it is packed into a panel (once per evaluation, or per head by the thread using it; never
// read in place), each query row assembled as a task loads it, scales folded in. Backward: the
// rows assembled once into buffers, the products of rows on them (parts/row_grad_tiles.hpp), and
// the gradients at them taken back into each term's dQ and dK at the end.
#include "../../form.hpp"
#include "../../kernel/aligned.hpp"
#include "../../kernel/dpbf16.hpp"
#include "../../kernel/qk.hpp"
#include "../operands/assembled_rows.hpp"
#include "../operands/features.hpp"
#include "../operands/key_panels.hpp"
#include "../plan/schedule.hpp"
#include "parts/common.hpp"
#include "parts/row_grad_tiles.hpp"

#include <bit>
#include <string_view>
#include <type_traits>
#include <utility>

namespace xattn {

/// Whether every operand of a dot base holds bfloat16.
template <class Base>
inline constexpr bool operands_bf16_v = false;
template <class P, class Q, class K>
inline constexpr bool operands_bf16_v<policy_base<P, Q, K>> =
    std::is_same_v<detail::value_t<Q>, bfloat16>&& std::is_same_v<detail::value_t<K>, bfloat16>;
template <class Q, class K, class Q2, class K2>
inline constexpr bool operands_bf16_v<sum_base<Q, K, Q2, K2>> =
    operands_bf16_v<policy_base<dot, Q, K>>&& operands_bf16_v<policy_base<dot, Q2, K2>>;

/// Whether the assembled rows of Base take vdpbf16ps: every operand bfloat16, fp32 sums, and a
/// build with AVX512-BF16.
template <class Acc, class Base>
inline constexpr bool assembles_bf16_v = kernel::has_dpbf16&& std::is_same_v<Acc, float>&& operands_bf16_v<Base>;

/// Key rows assembled into the slots of a block of bk, each once however often a packing asks for
/// it (pack_kt reads a row once per w features).
template <class R>
class assembled_key_block {
 public:
  /// Slots for any bk consecutive keys: a power of two, so a key's slot is a mask, not a division.
  assembled_key_block(std::size_t bk, std::size_t n)
      : n_(n), mask_(std::bit_ceil(std::max<std::size_t>(bk, 1)) - 1), rows_((mask_ + 1) * n), tag_(mask_ + 1, npos) {}
  /// Key j of panel `head` (any index of (b, kv head)), assembled by fill(R*) on first use.
  template <class Fill>
  const R* get(std::size_t head, std::size_t j, Fill&& fill) {
    const std::size_t slot = j & mask_, id = head * stride + j;
    R* row = rows_.data() + slot * n_;
    if (tag_[slot] != id) {
      fill(row);
      tag_[slot] = id;
    }
    return row;
  }

 private:
  static constexpr std::size_t npos = ~std::size_t(0), stride = std::size_t(1) << 40;
  std::size_t n_, mask_;
  std::vector<R> rows_;
  std::vector<std::size_t> tag_;
};

/// Pairs: the rows in bfloat16, products by vdpbf16ps (the backward is the same either way).
template <class Acc, class Base, bool Pairs = false>
struct dot_rows_path {
  using rows_t = assembled_rows<Acc, Base>;
  using Format = std::conditional_t<Pairs, bf16_pairs, strips<Acc>>;
  using R = typename Format::element;  // the assembled rows' elements
  static constexpr bool sums = rows_t::terms > 1;
  static constexpr std::string_view name =
      sums ? (Pairs ? "dot_sum_bf16" : "dot_sum") : (Pairs ? "dot_rotary_bf16" : "dot_rotary");
  static constexpr std::string_view what =
      sums ? (Pairs ? "Σ Q_t·K_tᵀ as one product of bfloat16 rows assembled from the terms (load transforms applied) "
                      "by vdpbf16ps"
                    : "Σ Q_t·K_tᵀ as one product of rows assembled from the terms (load transforms applied) by the "
                      "score microkernel")
           : (Pairs ? "Q·Kᵀ of the operands turned by their load transforms (rope), rounded to bfloat16, by vdpbf16ps"
                    : "Q·Kᵀ of the operands turned by their load transforms (rope) by the score microkernel");

  static constexpr bool plain_products = true;
  static path_facts facts(const Base& base, const problem&) {
    path_facts f = dot_facts<Acc>(rows_t::width_of(base));
    f.keys_in_place_ok = false;  // a key is assembled once, as it is packed
    f.plain_products = plain_products;
    f.query_grads_dense = sums || base.q.how != form::packed;  // sums: the assembled rows' own gradients
    return f;
  }
  static constexpr kernel::tile_op score_op(const forward_schedule&) {
    return Pairs ? kernel::tile_op{kernel::operation::qk_tile, kernel::bf16_pairs}
                 : kernel::op_on<Acc>(kernel::operation::qk_tile);
  }
  static constexpr kernel::tile_op key_pack_op = Pairs ? kernel::tile_op{kernel::operation::pack_kt, kernel::bf16_pairs}
                                                       : kernel::op_on<Acc>(kernel::operation::pack_kt);
  static constexpr std::string_view key_work =
      sums ? "assembled from the terms (load transforms applied) as they are packed"
           : "turned by their load transform (rope) as they are packed";
  static constexpr op_list key_ops{}, query_ops{};
  static constexpr backward_steps backward_ops = row_product_steps<Acc>();

  // ---- forward ----

  /// Key row j of kernel head (b, hk), assembled in R.
  static void load_key(const rows_t& rows, const Base& base, std::size_t b, std::size_t hk, std::size_t j, R* row,
                       Acc* scratch) {
    if constexpr (Pairs)
      rows.load_key_bf16(base, b, hk, j, row, scratch);
    else
      rows.load_key(base, b, hk, j, row);
  }

  /// The terms' rotation tables, and the keys packed assembled when the schedule packs them once.
  struct keys {
    rows_t rows;
    key_panels<Format> panels;
    std::size_t bk;
    keys(const Base& base, const problem& pr, const forward_schedule& fs) : rows(base, pr), bk(fs.block_k) {
      if (fs.keys == key_reads::panels) panels = make_key_panels<Format>(pr, rows.width(), fs.block_k);
    }
    /// Called by every thread of the pass's parallel region.
    void build(const Base& base, const problem& pr) {
      rows.build(base);
      if (panels.empty()) return;
      const std::size_t n = std::max<std::size_t>(rows.width(), 1);
      assembled_key_block<R> block(bk, n);  // this thread's
      std::vector<Acc> scratch(n);
      pack_key_panels(panels, pr, 1, [&](std::size_t bb, std::size_t h) {
        return [&, bb, h](std::size_t j) {
          return block.get(bb * pr.kv_heads + h, j,
                           [&](R* row) { load_key(rows, base, bb, h, j, row, scratch.data()); });
        };
      });
    }
  };

  /// One per thread: the task's queries, assembled and scaled.
  class tiles {
   public:
    tiles(const Base& base, const problem& pr, const keys& k, const forward_schedule& fs)
        : base_(base),
          keys_(k),
          n_(k.rows.width()),
          ldq_(Pairs ? n_ + n_ % 2 : n_),
          bk_(fs.block_k),
          kv_heads_(pr.kv_heads),
          q_(fs.block_q * std::max<std::size_t>(ldq_, 1), R(0)),
          block_(bk_, std::max<std::size_t>(n_, 1)),
          scratch_(std::max<std::size_t>(n_, 1)),
          reader_(k.panels, pr, n_, fs) {}

    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      if (at == 0) i0_ = i0;
      for (std::size_t r = 0; r < rows; ++r) {
        R* out = q_.data() + (at + r) * ldq_;
        if constexpr (Pairs)  // the scales on the fp32 sums, the rows as they are where possible
          keys_.rows.load_query_bf16(base_, b, h, i0 + r, out, scratch_.data());
        else
          keys_.rows.load_query(base_, b, h, i0 + r, scale, out);
      }
      if constexpr (Pairs) scale_ = Acc(double(scale) * keys_.rows.first_scale());
    }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t, std::size_t colsp, Acc* s, std::size_t lds) {
      const R* kt = reader_.panel(b, hk, j0, 1, [&](std::size_t j) {
        return block_.get(b * kv_heads_ + hk, j,
                          [&](R* row) { load_key(keys_.rows, base_, b, hk, j, row, scratch_.data()); });
      });
      const R* q = q_.data() + (i0 - i0_) * ldq_;
      if constexpr (Pairs)
        kernel::qk_tile(q, ldq_, rows, kernel::in_pairs(kt), n_, colsp, scale_, s, lds);
      else
        kernel::qk_tile(q, n_, rows, kt, n_, colsp, s, lds);
    }

   private:
    const Base& base_;
    const keys& keys_;
    std::size_t n_, ldq_, bk_, kv_heads_, i0_ = 0;
    Acc scale_ = 1;
    kernel::aligned_vector<R> q_;
    assembled_key_block<R> block_;
    std::vector<Acc> scratch_;
    key_reader<Format> reader_;
  };

  // ---- backward ----

  /// The assembled rows, once. One term: its gradients go straight to dQ and dK, rotated back at
  /// the end; a sum: to the assembled rows' own gradients, split into the terms at the end.
  struct grads {
    gradient_targets<Acc> to;
    rows_t rows;
    row_features<Acc> fq, fk, dfq, dfk;
    grads(const Base& base, const problem& pr, const backward_schedule&, const gradient_targets<Acc>& t)
        : to(t),
          rows(base, pr),
          fq(pr.batch, pr.q_heads, pr.q_len, rows.width()),
          fk(pr.batch, pr.kv_heads, pr.kv_len, rows.width()),
          dfq(sums ? pr.batch : 0, pr.q_heads, pr.q_len, rows.width()),
          dfk(sums ? pr.batch : 0, pr.kv_heads, pr.kv_len, rows.width()) {}
    /// Called by every thread of the backward's parallel region.
    void build(const Base& base, const problem&) {
      rows.build(base);
      fq.for_each_row([&](std::size_t b, std::size_t h, std::size_t i, Acc* row, Acc&) {
        rows.load_query(base, b, h, i, Acc(1), row);
      });
      fk.for_each_row(
          [&](std::size_t b, std::size_t h, std::size_t j, Acc* row, Acc&) { rows.load_key(base, b, h, j, row); });
    }
    std::size_t width() const noexcept { return rows.width(); }
    strided_view<const Acc> query_rows() const noexcept { return fq.view(); }
    strided_view<const Acc> key_rows() const noexcept { return fk.view(); }
    strided_view<Acc> key_grads() noexcept { return sums ? dfk.view() : to.dk; }
    strided_view<Acc> query_grads() noexcept { return sums ? dfq.view() : to.dq; }
    void reduce_row(std::size_t, std::size_t, std::size_t, std::size_t) {}
    template <class G>
    void finish(const Base& base, const problem&, const backward_schedule&, G&) {
      if constexpr (sums) {
        rows.queries_back(base, std::as_const(dfq).view(),
                          [&](auto t) { return t == hana::size_c<0> ? to.dq : to.dq2; });
        rows.keys_back(base, std::as_const(dfk).view(), [&](auto t) { return t == hana::size_c<0> ? to.dk : to.dk2; });
      } else {
        rows.rotate_back(base, to.dq, to.dk);
      }
    }
  };

  using grad_tiles = row_grad_tiles<Acc, grads>;
};

}  // namespace xattn
