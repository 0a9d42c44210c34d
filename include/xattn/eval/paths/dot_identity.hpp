#pragma once
// Score path dot_identity: S = Q · Kᵀ on the operands themselves (`dot`, `Q * trans(K)`).
// Forward: keys packed into panels (once per evaluation, or per head by the thread using it) and
// multiplied by the score microkernel, or read where they lie when decoding; the expression's
// scale is folded into the queries. Backward: the products of rows (parts/dot_grads.hpp) on Q and
// K, their gradients written straight into dQ and dK.
#include "../../form.hpp"
#include "../../kernel/aligned.hpp"
#include "../../kernel/qk.hpp"
#include "../../kernel/qk_q4.hpp"
#include "../../kernel/qk_q8.hpp"
#include "../../kernel/rows.hpp"
#include "../operands/key_panels.hpp"
#include "../plan/schedule.hpp"
#include "parts/common.hpp"
#include "parts/row_grad_tiles.hpp"

#include <string_view>

namespace xattn {

/// The keys of a product on the operands themselves, packed into panels of Format once per
/// evaluation when the schedule says so (else per head, or read in place, by the tiles).
template <class Format, class Base>
struct operand_panels {
  key_panels<Format> panels;
  operand_panels(const Base&, const problem& pr, const forward_schedule& fs) {
    if (fs.keys == key_reads::panels) panels = make_key_panels<Format>(pr, pr.q_dim, fs.block_k);
  }
  /// Called by every thread of the pass's parallel region.
  void build(const Base& base, const problem& pr) {
    const auto& kv = base.k.view;
    if (!panels.empty())
      pack_key_panels(panels, pr, kv.inner_stride(),
                      [&](std::size_t bb, std::size_t h) { return head_rows(kv, bb, h); });
  }
};

template <class Acc, class Base>
struct dot_identity_path {
  static constexpr std::string_view name = "dot_identity";
  static constexpr std::string_view what = "Q·Kᵀ of the operands by the score microkernel";

  /// Whether a score is scale · (Q·Kᵀ) and nothing else: the backward may take P and dS from the
  /// products' epilogues (grad_tiles::product).
  static constexpr bool plain_products = true;
  static path_facts facts(const Base& base, const problem& pr) {
    path_facts f = dot_facts<Acc>(pr.q_dim);
    f.keys_in_place_ok = base.k.view.rows_contiguous();
    f.plain_products = plain_products;
    f.query_grads_dense = base.q.how != form::packed;  // dQ is allocated in Q's form
    return f;
  }
  /// The rows qk_direct reads when decoding: K's elements, or a cache page's row handles.
  using key_row = decltype(rows_from(head_rows(std::declval<const Base&>().k.view, 0, 0), 0)(0));
  /// The operation that fills a forward score tile, keys read as the schedule says.
  static constexpr kernel::tile_op score_op(const forward_schedule& fs) {
    return fs.keys == key_reads::in_place ? kernel::op_on<key_row>(kernel::operation::qk_direct)
                                          : kernel::op_on<Acc>(kernel::operation::qk_tile);
  }
  static constexpr kernel::tile_op key_pack_op = kernel::op_on<Acc>(kernel::operation::pack_kt);
  static constexpr std::string_view key_work = "";  // the keys are packed as they are
  static constexpr op_list key_ops{}, query_ops{};
  static constexpr backward_steps backward_ops = row_product_steps<Acc>();

  // ---- forward ----

  using keys = operand_panels<strips<Acc>, Base>;

  /// One per thread: the task's queries, scaled.
  class tiles {
   public:
    tiles(const Base& base, const problem& pr, const keys& k, const forward_schedule& fs)
        : base_(base), n_(pr.q_dim), q_(fs.block_q * std::max<std::size_t>(n_, 1)), reader_(k.panels, pr, n_, fs) {}

    /// Queries [i0, i0 + rows) of head h into tile rows [at, at + rows); at > 0 appends another
    /// head's rows to the block loaded at 0 (grouped-query decoding).
    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      const auto& qv = base_.q.view;
      if (at == 0) i0_ = i0;
      for (std::size_t r = 0; r < rows; ++r)
        kernel::scaled_copy(qv.row(b, h, i0 + r), qv.inner_stride(), n_, scale, q_.data() + (at + r) * n_, 1);
    }

    /// Rows to prefetch with the keys the next scores read in place (kernel::row_prefetch).
    void prefetch_with_keys(kernel::row_prefetch also) noexcept { also_ = also; }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds) {
      const Acc* q = q_.data() + (i0 - i0_) * n_;  // rows [i0, i0 + rows) of the loaded block
      const auto& kv = base_.k.view;
      const auto keys = head_rows(kv, b, hk);
      if (const Acc* kt = reader_.panel(b, hk, j0, kv.inner_stride(), keys)) {
        kernel::qk_tile(q, n_, rows, kt, n_, colsp, s, lds);
        return;
      }
      kernel::qk_direct(q, n_, rows, rows_from(keys, j0), cols, n_, s, lds, also_);
    }

   private:
    const Base& base_;
    std::size_t n_, i0_ = 0;
    kernel::row_prefetch also_;
    kernel::aligned_vector<Acc> q_;
    key_reader<strips<Acc>> reader_;
  };

  // ---- backward ----

  /// dQ and dK are the results themselves; the tiles read Q and K where they lie.
  struct grads {
    gradient_targets<Acc> to;
    decltype(Base::q.view) q;
    decltype(Base::k.view) k;
    std::size_t n;
    grads(const Base& base, const problem& pr, const backward_schedule&, const gradient_targets<Acc>& t)
        : to(t), q(base.q.view), k(base.k.view), n(pr.q_dim) {}
    void build(const Base&, const problem&) {}
    std::size_t width() const noexcept { return n; }
    const auto& query_rows() const noexcept { return q; }
    const auto& key_rows() const noexcept { return k; }
    const strided_view<Acc>& key_grads() const noexcept { return to.dk; }
    strided_view<Acc> query_grads() const { return to.dq; }
    void reduce_row(std::size_t, std::size_t, std::size_t, std::size_t) {}
    template <class G>
    void finish(const Base&, const problem&, const backward_schedule&, G&) {}
  };

  using grad_tiles = row_grad_tiles<Acc, grads>;
};

}  // namespace xattn
