#pragma once
// The backward of a scoring policy in feature space, so that only the tiles are O(Sq·Skv):
//   1. before the tasks, every query and key projected once in the accumulator type (fq, α; fk, β),
//      by the forward's parallel projection; a policy with operator() only keeps its raw rows;
//   2. the tiles accumulate the gradients at them (dfq, dα; dfk, dβ) and, for a per-pair policy,
//      at combine's parameters, per task;
//   3. after the tasks, the parameters' gradients summed in task order, then the gradients at the
//      features taken back through the projections (policy/gradient.hpp: analytic members or the
//      tape), row by row in a fixed order -- deterministic.
#include "../../../kernel/trace.hpp"
#include "../../../policy/gradient.hpp"
#include "../../operands/features.hpp"
#include "../../plan/schedule.hpp"
#include "common.hpp"

#include <span>
#include <vector>

namespace xattn {

template <class Acc, class Base>
struct feature_grads {
  using P = typename Base::policy_type;
  static constexpr bool projects = declares_features<P>;

  gradient_targets<Acc> to;
  row_features<Acc> fq, fk;    // features and terms (raw rows and zero terms without projections)
  row_features<Acc> dfq, dfk;  // the gradients at them
  layout<4> dalpha_at;         // (chunks, B, Hq, Sq): dα's partial per key chunk
  std::vector<Acc> dalpha_parts;
  std::size_t params = 0;        // per-pair parameters (combine_parameter_count)
  std::vector<Acc> param_parts;  // (tasks, params): their gradients per task

  feature_grads(const Base& base, const problem& pr, const backward_schedule& bs, const gradient_targets<Acc>& t)
      : to(t),
        fq(pr.batch, pr.q_heads, pr.q_len, width(base, pr)),
        fk(pr.batch, pr.kv_heads, pr.kv_len, projects ? width(base, pr) : pr.k_dim),
        dfq(pr.batch, pr.q_heads, pr.q_len, fq.width()),
        dfk(pr.batch, pr.kv_heads, pr.kv_len, fk.width()),
        dalpha_at(layout<4>::row_major({bs.key_chunks, pr.batch, pr.q_heads, pr.q_len})),
        dalpha_parts(dalpha_at.size(), Acc(0)),
        params(separable<P>() ? 0 : combine_parameter_count(base.policy)),
        param_parts(bs.tasks * params, Acc(0)) {}

  /// Features per query: the policy's, or the raw query size.
  static std::size_t width(const Base& base, const problem& pr) {
    if constexpr (projects)
      return base.policy.feature_size(pr.q_dim, pr.k_dim);
    else
      return pr.q_dim;
  }

  /// Step 1, called by every thread of the backward's parallel region (orphaned omp fors).
  void build(const Base& base, const problem& pr) {
    if constexpr (projects) {
      project_queries(fq, base.q.view, pr.q_dim, base.policy);
      project_keys(fk, base.k.view, pr.k_dim, base.policy);
    } else {
      copy_rows(fq, base.q.view);
      copy_rows(fk, base.k.view);
    }
  }

  /// The rows dQ accumulates into.
  strided_view<Acc> query_grads() { return dfq.view(); }
  /// Where the tiles of query rows [i0, ...) of head (b, h) add the gradient at α, in chunk `chunk`.
  Acc* dalpha_part(std::size_t chunk, std::size_t b, std::size_t h, std::size_t i0) {
    return dalpha_parts.data() + dalpha_at(chunk, b, h, i0);
  }
  /// dα of query row (b, h, i): the chunks' partials summed in chunk order.
  void reduce_row(std::size_t b, std::size_t h, std::size_t i, std::size_t chunks) {
    Acc s = 0;
    for (std::size_t c = 0; c < chunks; ++c) s += dalpha_parts[std::size_t(dalpha_at(c, b, h, i))];
    dfq.term_of(b, h, i) = s;
  }
  /// Where a task keeps its parameters' gradients.
  Acc* task_parameters(std::size_t id) { return param_parts.data() + id * params; }

  /// Step 3, on one thread: the parameters' gradients into g, then dQ and dK (to.dq, to.dk).
  template <class G>
  void finish(const Base& base, const problem& pr, const backward_schedule& bs, G& g) {
    if (params > 0) {
      std::vector<double> dp(params, 0.0);  // summed in task order, in double
      for (std::size_t t = 0; t < bs.tasks; ++t)
        for (std::size_t k = 0; k < params; ++k) dp[k] += double(param_parts[t * params + k]);
      if constexpr (combines_backward_in<P, Acc>)
        base.policy.add_combine_gradients(std::span<const double>(dp), g);
      else if constexpr (learns_automatically<P>())
        for (std::size_t k = 0; k < params; ++k) g.d[k] += dp[k];
    }
    kernel::trace::note(kernel::tile_op::project_back);
    back(base, base.q.view, to.dq, dfq, pr.q_dim, false, g);
    back(base, base.k.view, to.dk, dfk, pr.k_dim, true, g);
  }

 private:
  /// Rows of x (d each) get the gradients df (with their terms) taken back through the projection.
  template <class View, class G>
  void back(const Base& base, const View& x, const strided_view<Acc>& dx, const row_features<Acc>& df, std::size_t d,
            bool keys, G& g) {
    const parameter_slots slots = automatic_slots(base.policy);
    std::vector<Acc> out(d), raw;
    const auto& sh = df.term_at.shape;
    for (std::size_t bb = 0; bb < sh[0]; ++bb)
      for (std::size_t h = 0; h < sh[1]; ++h)
        for (std::size_t s = 0; s < sh[2]; ++s) {
          const std::span<const Acc> dfr(df.row(bb, h, s), df.width());
          if constexpr (projects) {
            raw.resize(d);
            kernel::scaled_copy(x.row(bb, h, s), x.inner_stride(), d, Acc(1), raw.data(), 1);
            project_backward(base.policy, keys, std::span<const Acc>(raw), dfr, df.term_of(bb, h, s),
                             std::span<Acc>(out), slots, g);
            kernel::scaled_copy(out.data(), 1, d, Acc(1), dx.row(bb, h, s), dx.inner_stride());
          } else {
            kernel::scaled_copy(dfr.data(), 1, d, Acc(1), dx.row(bb, h, s), dx.inner_stride());
          }
        }
  }
};

}  // namespace xattn
