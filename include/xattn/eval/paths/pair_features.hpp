#pragma once
// Score path pair_features: projections plus combine, score = combine(fq, fk) + α(q) + β(k) per
// pair (additive attention, a Laplace kernel).
// Forward: keys projected once per evaluation and queries once per task, in the policy's scalar
// type; only combine runs per pair.
// Backward: queries and keys projected once, each tile's scores recomputed pair by pair and dS
// taken back pair by pair (parts/pair_grads.hpp) plus the terms (parts/term_grads.hpp), then back
// through the projections (parts/feature_grads.hpp).
#include "../../kernel/rows.hpp"
#include "../../policy/concepts.hpp"
#include "../operands/features.hpp"
#include "../plan/schedule.hpp"
#include "parts/common.hpp"
#include "parts/feature_grads.hpp"
#include "parts/pair_grads.hpp"

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

  static std::size_t width(const Base& base, const problem& pr) { return base.policy.feature_size(pr.q_dim, pr.k_dim); }
  static constexpr bool plain_products = false;
  static path_facts facts(const Base& base, const problem& pr) {
    path_facts f = pair_facts<Acc>(width(base, pr));
    f.query_grads_dense = true;  // the features' own gradient rows
    return f;
  }
  static constexpr kernel::tile_op score_op(const forward_schedule&) {
    return kernel::tile_op{kernel::operation::pair_scores};
  }
  static constexpr kernel::tile_op key_pack_op{};  // no panels
  static constexpr std::string_view key_work = "project keys to their features";
  static constexpr op_list key_ops{kernel::tile_op{kernel::operation::project_rows}},
      query_ops{kernel::tile_op{kernel::operation::project_rows}};
  static constexpr backward_steps backward_ops{{kernel::tile_op{kernel::operation::project_rows}},
                                               {},
                                               {kernel::tile_op{kernel::operation::pair_scores}},
                                               {kernel::tile_op{kernel::operation::pair_gradients}},
                                               {kernel::tile_op{kernel::operation::project_back}}};

  // ---- forward ----

  struct keys {
    row_features<S> f;
    keys(const Base& base, const problem& pr, const forward_schedule&)
        : f(pr.batch, pr.kv_heads, pr.kv_len, width(base, pr)) {}
    void build(const Base& base, const problem& pr) { project_keys(f, base.k.view, pr.k_dim, base.policy); }
  };

  class tiles {
   public:
    tiles(const Base& base, const problem& pr, const keys& k, const forward_schedule& fs)
        : base_(base),
          k_(k),
          pr_(pr),
          n_(k.f.width()),
          scale_(1),
          q_(fs.block_q * std::max<std::size_t>(n_, 1)),
          alpha_(fs.block_q) {}

    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      const auto& qv = base_.q.view;
      scale_ = scale;
      if (at == 0) i0_ = i0;
      kernel::trace::note(kernel::tile_op{kernel::operation::project_rows});
      for (std::size_t r = 0; r < rows; ++r)
        alpha_[at + r] =
            project_row(qv.row(b, h, i0 + r), qv.inner_stride(), pr_.q_dim, raw_, q_.data() + (at + r) * n_, n_,
                        [&](std::span<const S> x, std::span<S> out) { return base_.policy.project_query(x, out); });
    }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t, Acc* s, std::size_t lds) const {
      kernel::trace::note(kernel::tile_op{kernel::operation::pair_scores});
      const std::size_t r0 = i0 - i0_;  // rows [i0, i0 + rows) of the loaded block
      for (std::size_t r = 0; r < rows; ++r) {
        const std::span<const S> fq(q_.data() + (r0 + r) * n_, n_);
        for (std::size_t c = 0; c < cols; ++c) {
          const std::span<const S> fk(k_.f.row(b, hk, j0 + c), n_);
          const S v = S(base_.policy.combine(fq, fk)) + alpha_[r0 + r] + k_.f.term_of(b, hk, j0 + c);
          s[r * lds + c] = scale_ * Acc(v);
        }
      }
    }

   private:
    const Base& base_;
    const keys& k_;
    const problem& pr_;
    std::size_t n_, i0_ = 0;
    Acc scale_;
    std::vector<S> q_, alpha_, raw_;
  };

  // ---- backward ----

  using grads = feature_grads<Acc, Base>;

  using grad_tiles = feature_grad_tiles<Acc, Base, pair_grads<Acc, policy_t>, true>;
};

}  // namespace xattn
