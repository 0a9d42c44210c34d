#pragma once
// Score path dot_features: a separable policy, score = fq · fk + α(q) + β(k). Every key is
// projected once per evaluation, the features then take the dot_identity route (panels, or read
// in place when decoding); queries are projected per task. Projections run in the policy's scalar
// type and are converted to the accumulator type; the scale multiplies features, α and β.
#include "../../kernel/aligned.hpp"
#include "../../kernel/qk.hpp"
#include "../../kernel/rows.hpp"
#include "../../policy/concepts.hpp"
#include "../key_features.hpp"
#include "../key_panels.hpp"
#include "../resolved_schedule.hpp"

#include <string_view>
#include <vector>

namespace xattn {

template <class Acc, class Base>
struct dot_features_path {
  using policy_t = typename Base::policy_type;
  using S = projection_scalar_t<policy_t, Acc>;
  static constexpr std::string_view name = "dot_features";
  static constexpr std::string_view what = "projected once per row, then fq·fk by the score microkernel, plus α + β";
  static constexpr std::string_view key_work = "project keys to their features";
  static constexpr std::string_view query_work = "gather and project";

  static std::size_t width(const Base& b, const problem& pr) { return b.policy.feature_size(pr.q_dim, pr.k_dim); }
  static path_facts facts(const Base& b, const problem& pr) {
    return {true, true, width(b, pr), sizeof(Acc), simd::width<Acc>};
  }

  struct keys {
    key_features<S> f;  // in the policy's type; converted when packed, or in registers when decoding
    key_panels<strips<Acc>> panels;
    keys(const Base& b, const problem& pr, const resolved_schedule& rs) : f(pr, width(b, pr)) {
      if (rs.pack_panels) panels = make_key_panels<strips<Acc>>(pr, f.width(), rs.block_k);
    }
    void build(const Base& b, const problem& pr) {
      project_keys(f, b.k.view, pr.k_dim, b.policy);
      if (!panels.empty())
        pack_key_panels(panels, pr, 1, [&](std::size_t bb, std::size_t h, std::size_t j) { return f.row(bb, h, j); });
    }
  };

  class tiles {
   public:
    tiles(const Base& b, const problem& pr, const keys& k, const resolved_schedule& rs)
        : b_(b),
          k_(k),
          pr_(pr),
          n_(k.f.width()),
          bk_(rs.block_k),
          scale_(1),
          q_(rs.block_q * std::max<std::size_t>(n_, 1)),
          alpha_(rs.block_q),
          proj_(n_) {
      if (rs.pack_per_head) own_ = head_panels<strips<Acc>>(pr, n_, bk_);
    }

    /// As dot_identity's: tile rows [at, at + rows).
    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      const auto& qv = b_.q.view;
      scale_ = scale;
      if (at == 0) i0_ = i0;
      auto project = [&](std::span<const S> x, std::span<S> out) { return b_.policy.project_query(x, out); };
      for (std::size_t r = 0; r < rows; ++r) {
        Acc* dst = q_.data() + (at + r) * n_;
        S* f = [&] {  // projected in place when the policy computes in Acc
          if constexpr (std::is_same_v<S, Acc>)
            return dst;
          else
            return proj_.data();
        }();
        const S a = project_row(qv.row(b, h, i0 + r), qv.inner_stride(), pr_.q_dim, raw_, f, n_, project);
        kernel::scaled_copy(f, 1, n_, scale, dst, 1);  // the dot path folds the scale into the queries
        alpha_[at + r] = Acc(a) * scale;
      }
    }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds) {
      const std::size_t r0 = i0 - i0_;  // rows [i0, i0 + rows) of the loaded block
      const Acc* q = q_.data() + r0 * n_;
      if (!k_.panels.empty())
        kernel::qk_tile(q, n_, rows, k_.panels.panel(b, hk, j0 / bk_), n_, colsp, s, lds);
      else if (!own_.empty())
        kernel::qk_tile(q, n_, rows, own_.panel(b, hk, j0 / bk_, 1, [&](std::size_t j) { return k_.f.row(b, hk, j); }),
                        n_, colsp, s, lds);
      else
        kernel::qk_direct(
            q, n_, rows, [&](std::size_t c) { return k_.f.row(b, hk, j0 + c); }, cols, n_, s, lds);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c)
          s[r * lds + c] += alpha_[r0 + r] + scale_ * Acc(k_.f.term(b, hk, j0 + c));
    }

   private:
    const Base& b_;
    const keys& k_;
    const problem& pr_;
    std::size_t n_, bk_, i0_ = 0;
    Acc scale_;
    kernel::aligned_vector<Acc> q_;
    std::vector<Acc> alpha_;
    std::vector<S> proj_, raw_;
    head_panels<strips<Acc>> own_;  // pack_per_head
  };
};

}  // namespace xattn
