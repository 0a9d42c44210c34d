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
#include "dot_grads.hpp"
#include "pair_grads.hpp"
#include "term_grads.hpp"

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
    kernel::trace::note(kernel::tile_op{kernel::operation::project_back});
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

/// One thread's backward tiles of a path in feature space: Products (dot_grads: fq·fk by the
/// microkernels, or pair_grads: the policy's code per pair) on the projected rows, plus the terms
/// α_i + β_j when the policy has them (Terms).
template <class Acc, class Base, class Products, bool Terms>
class feature_grad_tiles {
 public:
  using grads = feature_grads<Acc, Base>;

  feature_grad_tiles(const Base& base, const problem&, grads& g, const backward_schedule& bs, Acc scale)
      : g_(g), products_(make(base, g, bs)), terms_(bs), scale_(scale) {}

  void begin_task() { products_.begin_task(); }
  void load_keys(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
    products_.load_keys(g_.fk.view(), b, hk, j0, cols);
    if constexpr (Terms) terms_.load_keys(g_.fk, b, hk, j0, cols);
  }
  void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t chunk) {
    products_.load_queries(g_.fq.view(), b, h, i0, rows);
    if constexpr (Terms) {
      terms_.load_queries(g_.fq, b, h, i0);
      dalpha_ = g_.dalpha_part(chunk, b, h, i0);
    }
    rows_ = rows;
  }
  /// scale · (score of the features + α + β), rows of the tile.
  template <class Range>
  void scores(std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds, Range range) {
    products_.scores(cols, colsp, s, lds, range);
    if constexpr (Terms) terms_.add(s, lds, rows_, colsp);
    for (std::size_t r = 0; r < rows_; ++r) kernel::scale_row(s + r * lds, colsp, scale_);
  }
  template <class RowRange, class KeyRange>
  void gradients(const Acc* ds, std::size_t lds, std::size_t cols, std::size_t colsp, Acc* dq, RowRange rows,
                 KeyRange keys) {
    if constexpr (Terms) terms_.gradients(ds, lds, rows_, colsp, dalpha_);
    products_.gradients(ds, lds, cols, dq, rows, keys);
  }
  void store_keys(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
    products_.store_keys(g_.dfk.view(), b, hk, j0, cols);
    if constexpr (Terms) terms_.store_keys(g_.dfk, b, hk, j0, cols);
  }
  void end_task(std::size_t id) { products_.store_parameters(g_.task_parameters(id)); }

 private:
  static Products make(const Base& base, const grads& g, const backward_schedule& bs) {
    if constexpr (std::is_same_v<Products, dot_grads<Acc>>)
      return Products(g.fq.width(), bs);
    else
      return Products(base.policy, g.fq.width(), g.fk.width(), bs);
  }

  grads& g_;
  Products products_;
  term_grads<Acc> terms_;
  Acc scale_;
  Acc* dalpha_ = nullptr;
  std::size_t rows_ = 0;
};

}  // namespace xattn
