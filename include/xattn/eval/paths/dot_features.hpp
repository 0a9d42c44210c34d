#pragma once
// Score path dot_features: a separable policy, score = fq · fk + α(q) + β(k).
// Forward: every key projected once per evaluation; the features then take the dot_identity route
// (panels, or read in place when decoding); queries are projected per task. Projections run in
// the policy's scalar type and are converted to the accumulator type; the scale multiplies
// features, α and β.
// Backward: every query and key projected once (the same parallel projection), the products of
// rows (parts/dot_grads.hpp) and the terms (parts/term_grads.hpp) on the features, then the
// gradients at the features taken back through the projections (policy/gradient.hpp).
#include "../../kernel/aligned.hpp"
#include "../../kernel/qk.hpp"
#include "../../kernel/rows.hpp"
#include "../../policy/concepts.hpp"
#include "../operands/features.hpp"
#include "../operands/key_panels.hpp"
#include "../plan/schedule.hpp"
#include "parts/common.hpp"
#include "parts/dot_grads.hpp"
#include "parts/feature_grads.hpp"

#include <string_view>
#include <vector>

namespace xattn {

template <class Acc, class Base>
struct dot_features_path {
  using policy_t = typename Base::policy_type;
  using S = projection_scalar_t<policy_t, Acc>;
  static constexpr std::string_view name = "dot_features";
  static constexpr std::string_view what = "projected once per row, then fq·fk by the score microkernel, plus α + β";

  static std::size_t width(const Base& base, const problem& pr) { return base.policy.feature_size(pr.q_dim, pr.k_dim); }
  static constexpr bool plain_products = false;
  static path_facts facts(const Base& base, const problem& pr) {
    path_facts f = dot_facts<Acc>(width(base, pr));
    f.keys_in_place_ok = true;
    f.query_grads_dense = true;  // the features' own gradient rows
    return f;
  }
  static constexpr kernel::tile_op score_op(const forward_schedule& fs) {
    return fs.keys == key_reads::in_place ? kernel::op_on<S>(kernel::operation::qk_direct)
                                          : kernel::op_on<Acc>(kernel::operation::qk_tile);
  }
  static constexpr kernel::tile_op key_pack_op = kernel::op_on<Acc>(kernel::operation::pack_kt);
  static constexpr std::string_view key_work = "project keys to their features";
  static constexpr op_list key_ops{kernel::tile_op{kernel::operation::project_rows}},
      query_ops{kernel::tile_op{kernel::operation::project_rows}};
  static constexpr backward_steps backward_ops = row_product_steps<Acc>(
      {kernel::tile_op{kernel::operation::project_rows}}, {}, {}, {kernel::tile_op{kernel::operation::project_back}});

  // ---- forward ----

  struct keys {
    row_features<S> f;  // in the policy's type; converted when packed, or in registers when decoding
    key_panels<strips<Acc>> panels;
    keys(const Base& base, const problem& pr, const forward_schedule& fs)
        : f(pr.batch, pr.kv_heads, pr.kv_len, width(base, pr)) {
      if (fs.keys == key_reads::panels) panels = make_key_panels<strips<Acc>>(pr, f.width(), fs.block_k);
    }
    void build(const Base& base, const problem& pr) {
      project_keys(f, base.k.view, pr.k_dim, base.policy);
      if (!panels.empty())
        pack_key_panels(panels, pr, 1, [&](std::size_t bb, std::size_t h) {
          return [&f = f, bb, h](std::size_t j) { return f.row(bb, h, j); };
        });
    }
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
          alpha_(fs.block_q),
          proj_(n_),
          reader_(k.panels, pr, n_, fs) {}

    /// As dot_identity's: tile rows [at, at + rows).
    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      const auto& qv = base_.q.view;
      scale_ = scale;
      if (at == 0) i0_ = i0;
      kernel::trace::note(kernel::tile_op{kernel::operation::project_rows});
      auto project = [&](std::span<const S> x, std::span<S> out) { return base_.policy.project_query(x, out); };
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

    /// Rows to prefetch with the keys the next scores read in place (kernel::row_prefetch).
    void prefetch_with_keys(kernel::row_prefetch also) noexcept { also_ = also; }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds) {
      const std::size_t r0 = i0 - i0_;  // rows [i0, i0 + rows) of the loaded block
      const Acc* q = q_.data() + r0 * n_;
      const auto key = [&](std::size_t j) { return k_.f.row(b, hk, j); };
      if (const Acc* kt = reader_.panel(b, hk, j0, 1, key))
        kernel::qk_tile(q, n_, rows, kt, n_, colsp, s, lds);
      else
        kernel::qk_direct(
            q, n_, rows, [&](std::size_t c) { return k_.f.row(b, hk, j0 + c); }, cols, n_, s, lds, also_);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c)
          s[r * lds + c] += alpha_[r0 + r] + scale_ * Acc(k_.f.term_of(b, hk, j0 + c));
    }

   private:
    const Base& base_;
    const keys& k_;
    const problem& pr_;
    std::size_t n_, i0_ = 0;
    Acc scale_;
    kernel::row_prefetch also_;
    kernel::aligned_vector<Acc> q_;
    std::vector<Acc> alpha_;
    std::vector<S> proj_, raw_;
    key_reader<strips<Acc>> reader_;
  };

  // ---- backward ----

  using grads = feature_grads<Acc, Base>;

  using grad_tiles = feature_grad_tiles<Acc, Base, dot_grads<Acc>, true>;
};

}  // namespace xattn
