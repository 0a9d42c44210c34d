#pragma once
// The reference evaluator: materialises every node in double precision, straight from the same
// plan -- scores from the policy's plain operator()(q, k) (never its projections), each modifier
// and mask element by element, a two-pass softmax, then P·V. It is the oracle of the tests and of
// nothing else: no evaluator includes it (eval() of weights and scores runs the fused kernel).
#include "../forward/turned_queries.hpp"
#include "../plan/plan.hpp"
#include "../plan/resolve.hpp"
#include "../tiling/mask_eval.hpp"

#include <xtensor/xtensor.hpp>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

namespace xattn {

struct reference_result {
  xt::xtensor<double, 4> scores;   // (B, Hq, Sq, Skv) after modifiers and masks (-inf: excluded)
  xt::xtensor<double, 4> weights;  // softmax (after dropout, if any); rows with no visible key are 0
                                   // (with a softmax term: rows sum to 1 minus its weight)
  xt::xtensor<double, 4> output;   // weights · V, (B, Hq, Sq, Dv); empty without values
  xt::xtensor<double, 3> lse;      // log-sum-exp per row (the softmax term included), -inf for rows with no visible key
};

namespace detail {

template <class S, class V>
std::vector<S> row_as(const V& v, std::size_t b, std::size_t h, std::size_t s) {
  std::vector<S> r(v.at.shape[3]);
  for (std::size_t d = 0; d < r.size(); ++d) r[d] = S(v(b, h, s, d));
  return r;
}

/// Row i of head h of terminal t as S, turned by its load transform when it has one (in S).
template <class S, class Tm>
std::vector<S> operand_row(const Tm& t, std::size_t b, std::size_t h, std::size_t i) {
  std::vector<S> r = row_as<S>(t.view, b, h, i);
  if constexpr (is_transformed_v<Tm>) {
    std::vector<S> out(r.size());
    t.transform.row(r.data(), std::ptrdiff_t(1), r.size(), b, i, S(1), out.data());
    return out;
  }
  return r;
}

/// The score of one pair by the policy's definition, operator()(q, k), in double when it accepts
/// double (else in the one type it does).
template <class Plan>
double base_score(const Plan& p, const problem& pr, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
  if constexpr (decltype(p.base)::tensor_scores) {
    return double(p.base.x.view(b, h, i, j));
  } else if constexpr (is_sum_base_v<std::decay_t<decltype(p.base)>>) {
    double s = 0;
    hana::for_each(score_terms(p.base), [&](const auto& t) {
      const std::size_t hk = h / (pr.q_heads / t.k.view.at.shape[1]);
      const auto q = operand_row<double>(t.q, b, h, i);
      const auto k = operand_row<double>(t.k, b, hk, j);
      double d = 0;
      for (std::size_t n = 0; n < q.size(); ++n) d += q[n] * k[n];
      s += t.scale * d;
    });
    return s;
  } else {
    using S = score_scalar_t<typename decltype(p.base)::policy_type, double>;
    const std::size_t hk = h / (pr.q_heads / pr.kv_heads);
    const auto q = operand_row<S>(p.base.q, b, h, i);
    const auto k = operand_row<S>(p.base.k, b, hk, j);
    return double(p.base.policy(std::span<const S>(q), std::span<const S>(k)));
  }
}

template <class Plan>
reference_result reference_of(const Plan& plan) {
  Plan p = plan;
  const problem pr = resolve(p);
  const auto ops = bind_all(p.ops, pr);
  auto masks = bind_all(p.masks, pr);
  // over selected keys (select(K, idx)), column j of query i is the key idx selects for i
  const auto at_query = [&]([[maybe_unused]] std::size_t i) {
    if constexpr (selects_v<Plan>) p.base.k.view.i = p.v.view.i = hana::back(masks).i = i;
  };
  const std::size_t B = pr.batch, H = pr.q_heads, Sq = pr.q_len, Skv = pr.kv_len;
  reference_result r;
  r.scores = xt::xtensor<double, 4>::from_shape({B, H, Sq, Skv});
  r.weights = xt::xtensor<double, 4>({B, H, Sq, Skv}, 0.0);
  r.lse = xt::xtensor<double, 3>::from_shape({B, H, Sq});
  constexpr double ninf = -std::numeric_limits<double>::infinity();
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < Sq; ++i) {
        at_query(i);
        const double term = p.term.logit(b, h);  // a key of score `term` that the row sees, with no value
        double m = term;
        for (std::size_t j = 0; j < Skv; ++j) {
          double s = p.scale * detail::base_score(p, pr, b, h, i, j);
          hana::for_each(ops, [&](const auto& op) { s = double(op(s, b, h, i, j)); });
          s = masked_score(masks, s, b, h, i, j);
          r.scores(b, h, i, j) = s;
          if (s > m || std::isnan(s)) m = s;  // a NaN score makes the whole row NaN, never "no key"
        }
        if (m == ninf) {  // no visible key: zero weights, zero output
          r.lse(b, h, i) = ninf;
          continue;
        }
        double l = std::exp(term - m);
        for (std::size_t j = 0; j < Skv; ++j) l += std::exp(r.scores(b, h, i, j) - m);
        for (std::size_t j = 0; j < Skv; ++j) r.weights(b, h, i, j) = std::exp(r.scores(b, h, i, j) - m) / l;
        r.lse(b, h, i) = m + std::log(l);
        if (p.drop.p > 0)
          random::scale_row(p.drop, std::uint32_t(b), std::uint32_t(h), std::uint32_t(i), 0, Skv,
                            &r.weights(b, h, i, 0));
      }
  if constexpr (Plan::has_values) {
    const auto& v = p.v.view;
    r.output = xt::xtensor<double, 4>({B, H, Sq, pr.v_dim}, 0.0);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t h = 0; h < H; ++h) {
        const std::size_t hv = h / (H / v.at.shape[1]);
        for (std::size_t i = 0; i < Sq; ++i)
          for (std::size_t j = 0; j < Skv; ++j) {
            at_query(i);
            const double wgt = r.weights(b, h, i, j);
            if (wgt == 0) continue;
            for (std::size_t d = 0; d < pr.v_dim; ++d) r.output(b, h, i, d) += wgt * double(v(b, hv, j, d));
          }
      }
  }
  return r;
}

}  // namespace detail

/// The reference of a plan: over a cache that turns its keys (options.rotate), with the queries
/// turned alike, as the fused pass does.
template <class Plan>
reference_result reference_eval(const Plan& plan) {
  reference_result r;
  with_turned_queries(plan, "reference(e)", [&](const Plan& p) { r = detail::reference_of(p); });
  return r;
}

/// The double-precision reference of any expression (weights, scores, output, lse; 4-D layout).
template <expression E>
reference_result reference(const E& e) {
  if constexpr (check_grammar<E>())
    return reference_eval(make_plan(e));
  else
    return {};
}

}  // namespace xattn
