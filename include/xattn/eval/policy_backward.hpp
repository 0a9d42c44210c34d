#pragma once
// The backward of score(policy, Q, K) in three steps, so that only the middle one is O(Sq·Skv):
//   1. project every query and key once, in the accumulator type: fq, α and fk, β (a policy with
//      operator() only keeps its raw rows and zero terms);
//   2. the fused backward on the features (backward_worker with a separable or pair source):
//      gradients at fq, α, fk, β and at combine's parameters;
//   3. back through the projections, row by row (policy/gradient.hpp: analytic members or the tape),
//      into dQ, dK and the policy's parameter gradients -- in a fixed order (deterministic).
#include "../policy/gradient.hpp"
#include "backward.hpp"

#include <span>
#include <vector>

namespace xattn {

/// Projected features of every query and key (step 1), and the gradients at them (steps 2 and 3).
template <class Acc>
struct feature_buffers {
  std::size_t n = 0, nk = 0;
  layout<4> q_at, k_at;
  std::vector<Acc> fq, fk, alpha, beta;      // features and terms
  std::vector<Acc> dfq, dfk, dalpha, dbeta;  // the gradients at them

  features<Acc> view() const { return {{fq.data(), q_at}, {fk.data(), k_at}, n, nk, alpha.data(), beta.data()}; }
};

/// Step 1: every query and key projected (or copied, for a policy with operator() only).
template <class Acc, class Plan>
feature_buffers<Acc> project_features(const Plan& p, const problem& pr) {
  const auto& policy = p.base.policy;
  using P = std::decay_t<decltype(policy)>;
  feature_buffers<Acc> fb;
  if constexpr (declares_features<P>)
    fb.n = fb.nk = policy.feature_size(pr.q_dim, pr.k_dim);
  else
    fb.n = pr.q_dim, fb.nk = pr.k_dim;
  fb.q_at = layout<4>::row_major({pr.batch, pr.q_heads, pr.q_len, fb.n});
  fb.k_at = layout<4>::row_major({pr.batch, pr.kv_heads, pr.kv_len, fb.nk});
  fb.fq.assign(fb.q_at.size(), Acc(0));
  fb.fk.assign(fb.k_at.size(), Acc(0));
  fb.alpha.assign(pr.batch * pr.q_heads * pr.q_len, Acc(0));
  fb.beta.assign(pr.batch * pr.kv_heads * pr.kv_len, Acc(0));
  auto project = [&](const auto& view, std::size_t heads, std::size_t len, std::size_t n, bool keys,
                     std::vector<Acc>& f, std::vector<Acc>& term) {
    for (std::size_t b = 0, r = 0; b < pr.batch; ++b)
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t s = 0; s < len; ++s, ++r) {
          const std::vector<Acc> x = detail::row_as<Acc>(view, b, h, s);
          const std::span<Acc> out(f.data() + r * n, n);
          if constexpr (declares_features<P>)
            term[r] = Acc(keys ? policy.project_key(std::span<const Acc>(x), out)
                               : policy.project_query(std::span<const Acc>(x), out));
          else
            std::copy(x.begin(), x.end(), out.begin());
        }
  };
  project(p.base.q.view, pr.q_heads, pr.q_len, fb.n, false, fb.fq, fb.alpha);
  project(p.base.k.view, pr.kv_heads, pr.kv_len, fb.nk, true, fb.fk, fb.beta);
  fb.dfq.assign(fb.fq.size(), Acc(0));
  fb.dfk.assign(fb.fk.size(), Acc(0));
  fb.dalpha.assign(fb.alpha.size(), Acc(0));
  fb.dbeta.assign(fb.beta.size(), Acc(0));
  return fb;
}

/// Step 3: dQ and dK (views in kernel coordinates) from the gradients at the features, and the
/// projections' share of the parameter gradients.
template <class Acc, class P>
void project_backward_all(const P& policy, const problem& pr, const feature_buffers<Acc>& fb,
                          const strided_view<Acc>& dq, const strided_view<Acc>& dk, const auto& q_view,
                          const auto& k_view, parameter_gradients_t<P>& g) {
  const parameter_slots slots = automatic_slots(policy);
  auto back = [&](const auto& view, const strided_view<Acc>& to, std::size_t heads, std::size_t len, std::size_t d,
                  std::size_t n, bool keys, const std::vector<Acc>& df, const std::vector<Acc>& dterm) {
    std::vector<Acc> dx(d);
    for (std::size_t b = 0, r = 0; b < pr.batch; ++b)
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t s = 0; s < len; ++s, ++r) {
          const std::span<const Acc> dfr(df.data() + r * n, n);
          if constexpr (declares_features<P>) {
            const std::vector<Acc> x = detail::row_as<Acc>(view, b, h, s);
            project_backward(policy, keys, std::span<const Acc>(x), dfr, dterm[r], std::span<Acc>(dx), slots, g);
          } else {
            std::copy(dfr.begin(), dfr.end(), dx.begin());
          }
          kernel::scaled_copy(dx.data(), 1, d, Acc(1), to.row(b, h, s), to.inner_stride());
        }
  };
  back(q_view, dq, pr.q_heads, pr.q_len, pr.q_dim, fb.n, false, fb.dfq, fb.dalpha);
  back(k_view, dk, pr.kv_heads, pr.kv_len, pr.k_dim, fb.nk, true, fb.dfk, fb.dbeta);
}

/// The whole backward of a score(policy, Q, K) plan: steps 1-3; dq, dk in kernel coordinates.
/// The parameters' gradients are added into g (and bias gradients into dbias, as run_backward
/// does), so that the blocks of a larger problem can accumulate theirs; `exact` as in run_backward.
template <class Acc, class Plan, class DO, class O>
backward_report run_policy_backward(const Plan& p, const problem& pr, const schedule& sch,
                                    const strided_view<const DO>& d_out, const strided_view<const O>& out,
                                    const strided_view<const Acc, 3>& lse, const strided_view<Acc>& dq,
                                    const strided_view<Acc>& dk, const strided_view<Acc>& dv,
                                    std::vector<xt::xarray<Acc>>& dbias, std::vector<learned_gradients>& dmodify,
                                    parameter_gradients_t<typename decltype(p.base)::policy_type>& g,
                                    const std::pair<Acc, Acc>* exact = nullptr) {
  using P = typename decltype(p.base)::policy_type;
  feature_buffers<Acc> fb = project_features<Acc>(p, pr);
  const backward_schedule bs = resolve_backward(sch, pr, fb.n, simd::width<Acc>, kernel::strip_width<Acc>, sizeof(Acc));
  std::vector<double> dparams;
  backward_out<Acc, Acc> to{.dq = {fb.dfq.data(), fb.q_at},
                            .dk = {fb.dfk.data(), fb.k_at},
                            .dv = dv,
                            .dalpha = fb.dalpha.data(),
                            .dbeta = fb.dbeta.data(),
                            .dparams = &dparams,
                            .dbias = &dbias,
                            .dmodify = &dmodify};
  backward_report rep;
  if constexpr (separable<P>()) {
    rep = run_backward<Acc>(p, pr, bs, separable_source<Acc>{fb.view()}, d_out, out, lse, to, exact);
  } else {
    const pair_source<Acc, P> src{fb.view(), &p.base.policy, combine_parameter_count(p.base.policy),
                                  automatic_slots(p.base.policy)};
    rep = run_backward<Acc>(p, pr, bs, src, d_out, out, lse, to, exact);
  }
  if constexpr (combines_backward_in<P, Acc>) {
    if (!dparams.empty()) p.base.policy.add_combine_gradients(std::span<const double>(dparams), g);
  } else if constexpr (learns_automatically<P>()) {
    for (std::size_t k = 0; k < dparams.size(); ++k) g.d[k] += dparams[k];
  }
  project_backward_all<Acc>(p.base.policy, pr, fb, dq, dk, p.base.q.view, p.base.k.view, g);
  return rep;
}

}  // namespace xattn
