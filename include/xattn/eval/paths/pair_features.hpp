#pragma once
// Score path pair_features: projections plus combine, score = combine(fq, fk) + α(q) + β(k) per
// pair (additive attention, a Laplace kernel). Keys are projected once per evaluation and queries
// once per task, in the policy's scalar type; only combine runs per pair.
#include "../../kernel/rows.hpp"
#include "../../policy/concepts.hpp"
#include "../key_features.hpp"
#include "../resolved_schedule.hpp"

#include <span>
#include <string_view>
#include <vector>

namespace xattn {

template <class Acc, class Base>
struct pair_features_path {
  using policy_t = typename Base::policy_type;
  using S = combine_scalar_t<policy_t, Acc>;
  static constexpr std::string_view name = "pair_features";
  static constexpr std::string_view what = "projected once per row, then combine(fq, fk) + α + β per pair";
  static constexpr std::string_view key_work = "project keys to their features";
  static constexpr std::string_view query_work = "gather and project";

  static std::size_t width(const Base& b, const problem& pr) { return b.policy.feature_size(pr.q_dim, pr.k_dim); }
  static path_facts facts(const Base& b, const problem& pr) {
    return {false, false, width(b, pr), sizeof(Acc), simd::width<Acc>};
  }

  struct keys {
    key_features<S> f;
    keys(const Base& b, const problem& pr, const resolved_schedule&) : f(pr, width(b, pr)) {}
    void build(const Base& b, const problem& pr) { project_keys(f, b.k.view, pr.k_dim, b.policy); }
  };

  class tiles {
   public:
    tiles(const Base& b, const problem& pr, const keys& k, const resolved_schedule& rs)
        : b_(b),
          k_(k),
          pr_(pr),
          n_(k.f.width()),
          scale_(1),
          q_(rs.block_q * std::max<std::size_t>(n_, 1)),
          alpha_(rs.block_q) {}

    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      const auto& qv = b_.q.view;
      scale_ = scale;
      if (at == 0) i0_ = i0;
      for (std::size_t r = 0; r < rows; ++r)
        alpha_[at + r] =
            project_row(qv.row(b, h, i0 + r), qv.inner_stride(), pr_.q_dim, raw_, q_.data() + (at + r) * n_, n_,
                        [&](std::span<const S> x, std::span<S> out) { return b_.policy.project_query(x, out); });
    }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t, Acc* s, std::size_t lds) const {
      const std::size_t r0 = i0 - i0_;  // rows [i0, i0 + rows) of the loaded block
      for (std::size_t r = 0; r < rows; ++r) {
        const std::span<const S> fq(q_.data() + (r0 + r) * n_, n_);
        for (std::size_t c = 0; c < cols; ++c) {
          const std::span<const S> fk(k_.f.row(b, hk, j0 + c), n_);
          const S v = S(b_.policy.combine(fq, fk)) + alpha_[r0 + r] + k_.f.term(b, hk, j0 + c);
          s[r * lds + c] = scale_ * Acc(v);
        }
      }
    }

   private:
    const Base& b_;
    const keys& k_;
    const problem& pr_;
    std::size_t n_, i0_ = 0;
    Acc scale_;
    std::vector<S> q_, alpha_, raw_;
  };
};

}  // namespace xattn
