#pragma once
// Score path dot_identity: S = Q · Kᵀ on the operands themselves (`dot`, `Q * trans(K)`). Keys are
// packed into panels (once per evaluation, or per head by the thread using it) and multiplied by
// the score microkernel; when decoding, they are read where they lie. The expression's scale is
// folded into the queries.
#include "../../kernel/aligned.hpp"
#include "../../kernel/qk.hpp"
#include "../../kernel/rows.hpp"
#include "../key_panels.hpp"
#include "../resolved_schedule.hpp"

#include <string_view>
#include <vector>

namespace xattn {

/// The keys of a product on the operands themselves, packed into panels of Format once per
/// evaluation when the schedule says so (else per head, or read in place, by the tiles). Built
/// once, read by every task.
template <class Format, class Base>
struct operand_panels {
  key_panels<Format> panels;
  operand_panels(const Base&, const problem& pr, const resolved_schedule& rs) {
    if (rs.pack_panels) panels = make_key_panels<Format>(pr, pr.q_dim, rs.block_k);
  }
  /// Called by every thread of the pass's parallel region.
  void build(const Base& b, const problem& pr) {
    const auto& kv = b.k.view;
    if (!panels.empty())
      pack_key_panels(panels, pr, kv.inner_stride(),
                      [&](std::size_t bb, std::size_t h, std::size_t j) { return kv.row(bb, h, j); });
  }
};

template <class Acc, class Base>
struct dot_identity_path {
  static constexpr std::string_view name = "dot_identity";
  static constexpr std::string_view what = "Q·Kᵀ of the operands by the score microkernel";
  static constexpr std::string_view key_work = "";  // the keys are packed as they are
  static constexpr std::string_view query_work = "gather";

  static path_facts facts(const Base& b, const problem& pr) {
    return {true, b.k.view.rows_contiguous(), pr.q_dim, sizeof(Acc), simd::width<Acc>};
  }

  using keys = operand_panels<strips<Acc>, Base>;

  /// One per thread: the task's queries, scaled.
  class tiles {
   public:
    tiles(const Base& b, const problem& pr, const keys& k, const resolved_schedule& rs)
        : b_(b), k_(k), n_(pr.q_dim), bk_(rs.block_k), q_(rs.block_q * std::max<std::size_t>(n_, 1)) {
      if (rs.pack_per_head) own_ = head_panels<strips<Acc>>(pr, n_, bk_);
    }

    /// Queries [i0, i0 + rows) of head h into tile rows [at, at + rows); at > 0 appends another
    /// head's rows to the block loaded at 0 (grouped-query decoding).
    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      const auto& qv = b_.q.view;
      if (at == 0) i0_ = i0;
      for (std::size_t r = 0; r < rows; ++r)
        kernel::scaled_copy(qv.row(b, h, i0 + r), qv.inner_stride(), n_, scale, q_.data() + (at + r) * n_, 1);
    }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds) {
      const Acc* q = q_.data() + (i0 - i0_) * n_;  // rows [i0, i0 + rows) of the loaded block
      const auto& kv = b_.k.view;
      if (!k_.panels.empty()) {
        kernel::qk_tile(q, n_, rows, k_.panels.panel(b, hk, j0 / bk_), n_, colsp, s, lds);
      } else if (!own_.empty()) {
        const Acc* kt = own_.panel(b, hk, j0 / bk_, kv.inner_stride(), [&](std::size_t j) { return kv.row(b, hk, j); });
        kernel::qk_tile(q, n_, rows, kt, n_, colsp, s, lds);
      } else {
        kernel::qk_direct(
            q, n_, rows, [&](std::size_t c) { return kv.row(b, hk, j0 + c); }, cols, n_, s, lds);
      }
    }

   private:
    const Base& b_;
    const keys& k_;
    std::size_t n_, bk_, i0_ = 0;
    kernel::aligned_vector<Acc> q_;
    head_panels<strips<Acc>> own_;  // pack_per_head
  };
};

}  // namespace xattn
