#pragma once
// Score path dot_bf16: S = Q · Kᵀ of bfloat16 queries and keys by vdpbf16ps (kernel/dpbf16.hpp),
// where the build has AVX512-BF16. Keys are packed into panels of feature pairs (once per
// evaluation, or per head by the thread using it); the task's queries are copied as they are, and
// the scale multiplies the fp32 sums, so no operand is rounded. When decoding, keys are read in
// place, their rows already pairs of the summed axis (kernel::qk_direct_pairs).
#include "../../expr/tensor_ref.hpp"
#include "../../kernel/aligned.hpp"
#include "../../kernel/dpbf16.hpp"
#include "../../kernel/qk.hpp"
#include "../../kernel/rows.hpp"
#include "../key_panels.hpp"
#include "../resolved_schedule.hpp"
#include "dot_identity.hpp"

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
  static constexpr std::string_view name = "dot_bf16";
  static constexpr std::string_view what = "Q·Kᵀ of bfloat16 operands by vdpbf16ps (fp32 sums)";
  static constexpr std::string_view key_work = "";  // the keys are packed as they are
  static constexpr std::string_view query_work = "gather";

  static path_facts facts(const Base& b, const problem& pr) { return dot_identity_path<Acc, Base>::facts(b, pr); }

  using keys = operand_panels<bf16_pairs, Base>;

  /// One per thread: the task's queries as they are, in bf16 rows (even length, the odd feature's
  /// partner zero).
  class tiles {
   public:
    tiles(const Base& b, const problem& pr, const keys& k, const resolved_schedule& rs)
        : b_(b),
          k_(k),
          n_(pr.q_dim),
          ldq_(n_ + n_ % 2),
          bk_(rs.block_k),
          pairs_(rs.pack_panels || rs.pack_per_head),
          q16_(rs.block_q * std::max<std::size_t>(ldq_, 1), bfloat16::from_bits(0)) {
      if (rs.pack_per_head) own_ = head_panels<bf16_pairs>(pr, n_, bk_);
    }

    /// Queries [i0, i0 + rows) of head h into tile rows [at, at + rows); at > 0 appends another
    /// head's rows to the block loaded at 0 (grouped-query decoding).
    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      const auto& qv = b_.q.view;
      if (at == 0) i0_ = i0;
      scale_ = scale;
      for (std::size_t r = 0; r < rows; ++r) {
        const auto* q = qv.row(b, h, i0 + r);
        for (std::size_t d = 0; d < n_; ++d) q16_[(at + r) * ldq_ + d] = q[std::ptrdiff_t(d) * qv.inner_stride()];
      }
    }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds) {
      const auto& kv = b_.k.view;
      const bfloat16* q = q16_.data() + (i0 - i0_) * ldq_;
      if (!pairs_) {
        kernel::qk_direct_pairs(
            q, ldq_, rows, [&](std::size_t c) { return kv.row(b, hk, j0 + c); }, cols, n_, scale_, s, lds);
        return;
      }
      const bfloat16* kt = !k_.panels.empty() ? k_.panels.panel(b, hk, j0 / bk_)
                                              : own_.panel(b, hk, j0 / bk_, kv.inner_stride(),
                                                           [&](std::size_t j) { return kv.row(b, hk, j); });
      kernel::qk_tile_pairs(q, ldq_, rows, kt, n_, colsp, scale_, s, lds);
    }

   private:
    const Base& b_;
    const keys& k_;
    std::size_t n_, ldq_, bk_, i0_ = 0;
    bool pairs_;
    Acc scale_ = 1;
    kernel::aligned_vector<bfloat16> q16_;
    head_panels<bf16_pairs> own_;  // pack_per_head
  };
};

}  // namespace xattn
