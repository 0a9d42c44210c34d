#pragma once
// The reference backward: gradients of any expression in double precision, materialised, from
// the reference forward -- the oracle of the backward tests. The softmax and P·V are differentiated
// by hand (dS = P ∘ (dP − rowsum(P ∘ dP))); modifiers by running them on dual numbers; the scoring
// policy's operator() by one dual evaluation per input feature (so any policy written generically
// in its scalar type differentiates here, whatever its speed), and learnables (learnable.hpp) by
// one dual evaluation each, seeded: forward mode throughout, where the fused backward uses the
// tape. Masked scores are constants: a filled or excluded score gets no gradient, as in d2l's
// masked fill.
#include "../../dual.hpp"
#include "../../learnable.hpp"
#include "../../policy/ops/bias.hpp"
#include "../plan/bias_terms.hpp"
#include "reference.hpp"

#include <xtensor/xarray.hpp>

#include <span>
#include <vector>

namespace xattn {

struct reference_gradients {
  xt::xtensor<double, 4> dq;                 // (B, Hq, Sq, Dq); empty for tensor scores
  xt::xtensor<double, 4> dk;                 // (B, Hkv, Skv, Dk); empty for tensor scores
  xt::xtensor<double, 4> dq2, dk2;           // a sum of products: the second term's; else empty
  xt::xtensor<double, 4> dv;                 // (B, Hkv, Skv, Dv)
  xt::xtensor<double, 4> dx;                 // (B, Hq, Sq, Skv) for tensor scores X, else empty
  std::vector<xt::xarray<double>> dbias;     // one per bias(t) term, in order, in t's shape
  std::vector<double> dscore;                // a policy's learnables (learned_gradients' order); else empty
  std::vector<std::vector<double>> dmodify;  // one per modifier with learnables, in order
  std::vector<double> dsinks;                // the softmax term's parameters ((Hq) for sinks); else empty
};

/// A zero tensor in the shape of bias term `op`'s tensor, and bias_gradient_view of it.
template <class A, class T>
std::pair<xt::xarray<A>, strided_view<A>> bias_gradient(const tensor_bias<T>& op, const problem& pr) {
  std::pair<xt::xarray<A>, strided_view<A>> r;
  r.first = xt::zeros<A>(op.tensor.shape);
  r.second = bias_gradient_view(r.first, op, pr);
  return r;
}

/// Whether no mask hides key j from query i.
template <class Masks>
bool all_visible(const Masks& masks, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
  return hana::all_of(masks, [&](const auto& m) { return m.visible(b, h, i, j); });
}

namespace detail {

template <class P>
constexpr bool check_policy_gradient() {
  static_assert(scores_in<P, dual<double>>,
                "xattn: grad(e): the scoring policy has no gradient. Write its operator()(q, k) as a template "
                "over the scalar type T, calling math functions unqualified (using std::sqrt; sqrt(x)), so that it "
                "runs on xattn::dual<double>.");
  return scores_in<P, dual<double>>;
}

/// Adds g · ∂score/∂q into dq and g · ∂score/∂k into dk for one pair, one dual evaluation per feature.
template <class P>
void add_pair_gradient(const P& policy, std::span<const double> q, std::span<const double> k, double g, double* dq,
                       double* dk) {
  using D = dual<double>;
  std::vector<D> qd(q.begin(), q.end()), kd(k.begin(), k.end());
  auto one = [&](std::vector<D>& x, std::size_t n) {
    x[n].d = 1;
    const double d = policy(std::span<const D>(qd), std::span<const D>(kd)).d;
    x[n].d = 0;
    return d;
  };
  for (std::size_t n = 0; n < q.size(); ++n) dq[n] += g * one(qd, n);
  for (std::size_t n = 0; n < k.size(); ++n) dk[n] += g * one(kd, n);
}

/// Adds g · ∂f/∂(slot n) into d[n] for every learnable slot, f() evaluated on dual numbers with
/// that slot seeded: one evaluation per learnable.
template <class F>
void add_learned_gradients(const parameter_slots& slots, double g, F&& f, std::vector<double>& d) {
  for (std::size_t n = 0; n < slots.size(); ++n) {
    const seed_learnable seed(slots.address(n));
    d[n] += g * f().d;
  }
}

}  // namespace detail

/// Gradients of plan p's output (or weights, without values) given d_out, (B, Hq, Sq, Dv) -- or
/// (B, Hq, Sq, Skv) for a weights expression.
template <class Plan>
reference_gradients reference_grad(const Plan& p, const xt::xtensor<double, 4>& d_out) {
  static_assert(!selects_v<Plan>,
                "xattn: reference_grad of select(K, idx): differentiate the dense attention whose bool_mask admits "
                "the selected keys instead (the same gradients for distinct indices)");
  using base_t = decltype(p.base);
  if constexpr (!base_t::tensor_scores) detail::check_policy_gradient<typename base_t::policy_type>();
  const problem pr = resolve(p);
  const reference_result fwd = reference_eval(p);
  const auto ops = bind_all(p.ops, pr);
  const auto masks = bind_all(p.masks, pr);
  const std::size_t B = pr.batch, H = pr.q_heads, Sq = pr.q_len, Skv = pr.kv_len, G = pr.q_heads / pr.kv_heads;
  reference_gradients r;
  if constexpr (Plan::has_term) r.dsinks.assign(p.term.parameters(pr), 0.0);
  if constexpr (base_t::tensor_scores) {
    r.dx = xt::zeros<double>({B, H, Sq, Skv});
  } else {
    r.dq = xt::zeros<double>({B, H, Sq, pr.q_dim});
    r.dk = xt::zeros<double>({B, pr.kv_heads, Skv, pr.k_dim});
    if constexpr (is_sum_base_v<std::decay_t<base_t>>) {
      r.dq2 = xt::zeros<double>(p.base.q2.view.at.shape);
      r.dk2 = xt::zeros<double>(p.base.k2.view.at.shape);
    }
  }
  // gradient views of the bias terms, by modifier index (reserved: the views point into dbias)
  constexpr std::size_t n_ops = decltype(hana::length(ops))::value;
  std::array<strided_view<double>, n_ops + 1> bias_views{};
  r.dbias.reserve(count_biases<std::decay_t<decltype(ops)>>());
  std::size_t op_index = 0;
  hana::for_each(ops, [&](const auto& op) {
    if constexpr (is_tensor_bias_v<std::decay_t<decltype(op)>>) {
      auto [g, view] = bias_gradient<double>(op, pr);
      r.dbias.push_back(std::move(g));
      bias_views[op_index] = {r.dbias.back().data(), view.at};
    }
    ++op_index;
  });

  xt::xtensor<double, 4> dw;  // dL/d(weights after dropout)
  if constexpr (Plan::has_values) {
    const auto& v = p.v.view;
    r.dv = xt::zeros<double>({B, pr.kv_heads, Skv, pr.v_dim});
    dw = xt::zeros<double>({B, H, Sq, Skv});
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t i = 0; i < Sq; ++i)
          for (std::size_t j = 0; j < Skv; ++j) {
            double s = 0;
            const double w = fwd.weights(b, h, i, j);
            for (std::size_t d = 0; d < pr.v_dim; ++d) {
              s += d_out(b, h, i, d) * double(v(b, h / G, j, d));
              r.dv(b, h / G, j, d) += w * d_out(b, h, i, d);
            }
            dw(b, h, i, j) = s;
          }
  } else {
    dw = d_out;
  }

  // learnables: the policy's, and each modifier's (slots of the bound modifiers, which run below)
  parameter_slots policy_slots;
  if constexpr (!base_t::tensor_scores) {
    if constexpr (declares_learnables<typename base_t::policy_type>) policy_slots = parameter_slots(p.base.policy);
  }
  r.dscore.assign(policy_slots.size(), 0.0);
  std::array<parameter_slots, n_ops + 1> op_slots{};
  std::array<std::size_t, n_ops + 1> op_out{};
  op_index = 0;
  hana::for_each(ops, [&](const auto& op) {
    if constexpr (declares_learnables<std::decay_t<decltype(op)>>) {
      op_slots[op_index] = parameter_slots(op);
      op_out[op_index] = r.dmodify.size();
      r.dmodify.emplace_back(op_slots[op_index].size(), 0.0);
    }
    ++op_index;
  });

  std::vector<double> prob(Skv), dp(Skv), keep(Skv);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < Sq; ++i) {
        const double lse = fwd.lse(b, h, i);
        if (std::isinf(lse)) continue;  // no visible key: weights 0, no gradient to the scores
        std::fill(keep.begin(), keep.end(), 1.0);
        if (p.drop.p > 0)
          random::scale_row(p.drop, std::uint32_t(b), std::uint32_t(h), std::uint32_t(i), 0, Skv, keep.data());
        double delta = 0;
        for (std::size_t j = 0; j < Skv; ++j) {
          prob[j] = std::exp(fwd.scores(b, h, i, j) - lse);
          dp[j] = dw(b, h, i, j) * keep[j];
          delta += prob[j] * dp[j];
        }
        if constexpr (Plan::has_term)  // the term's dP is 0
          if (const double t = p.term.logit(b, h); !std::isinf(t))
            p.term.add_gradient(b, h, -(std::exp(t - lse) * delta), r.dsinks.data());
        for (std::size_t j = 0; j < Skv; ++j) {
          if (!all_visible(masks, b, h, i, j)) continue;  // filled or excluded: a constant
          // forward through the modifiers on duals, keeping each one's derivative
          std::array<double, n_ops + 1> deriv{}, in{}, g_out{};
          double s = p.scale * detail::base_score(p, pr, b, h, i, j);
          std::size_t k = 0;
          hana::for_each(ops, [&](const auto& op) {
            in[k] = s;
            const dual<double> y = op(dual<double>{s, 1.0}, b, h, i, j);
            deriv[k++] = y.d;
            s = y.v;
          });
          double g = prob[j] * (dp[j] - delta);
          for (std::size_t m = n_ops; m-- > 0;) {
            g_out[m] = g;
            if (bias_views[m].data) bias_views[m](b, h, i, j) += g;
            g *= deriv[m];
          }
          k = 0;
          hana::for_each(ops, [&](const auto& op) {
            if (op_slots[k].size())
              detail::add_learned_gradients(
                  op_slots[k], g_out[k],
                  [&] {
                    return dual<double>(op(dual<double>{in[k], 0.0}, b, h, i, j));
                  },
                  r.dmodify[op_out[k]]);
            ++k;
          });
          g *= p.scale;
          if constexpr (base_t::tensor_scores) {
            r.dx(b, h, i, j) += g;
          } else if constexpr (is_sum_base_v<std::decay_t<base_t>>) {  // each term's rows, at the rotated rows
            std::array<xt::xtensor<double, 4>*, 4> to{&r.dq, &r.dk, &r.dq2, &r.dk2};
            std::size_t t_at = 0;
            hana::for_each(score_terms(p.base), [&](const auto& t) {
              const std::size_t hk = h / (H / t.k.view.at.shape[1]);
              const auto q = detail::operand_row<double>(t.q, b, h, i);
              const auto kr = detail::operand_row<double>(t.k, b, hk, j);
              for (std::size_t n = 0; n < q.size(); ++n) {
                (*to[t_at])(b, h, i, n) += g * t.scale * kr[n];
                (*to[t_at + 1])(b, hk, j, n) += g * t.scale * q[n];
              }
              t_at += 2;
            });
          } else {
            const auto q = detail::operand_row<double>(p.base.q, b, h, i);
            const auto kr = detail::operand_row<double>(p.base.k, b, h / G, j);
            detail::add_pair_gradient(p.base.policy, q, kr, g, &r.dq(b, h, i, 0), &r.dk(b, h / G, j, 0));
            if (policy_slots.size()) {
              using D = dual<double>;
              const std::vector<D> qd(q.begin(), q.end()), kd(kr.begin(), kr.end());
              detail::add_learned_gradients(
                  policy_slots, g, [&] { return D(p.base.policy(std::span<const D>(qd), std::span<const D>(kd))); },
                  r.dscore);
            }
          }
        }
      }
  if constexpr (transforms_v<std::decay_t<base_t>>) {  // gradients at the transformed rows, taken back
    const auto back = [&](const auto& t, xt::xtensor<double, 4>& d) {
      if constexpr (is_transformed_v<std::decay_t<decltype(t)>>)
        for (std::size_t b = 0; b < B; ++b)
          for (std::size_t h = 0; h < d.shape()[1]; ++h)
            for (std::size_t i = 0; i < d.shape()[2]; ++i)
              t.transform.row_transposed(&d(b, h, i, 0), std::ptrdiff_t(1), d.shape()[3], b, i);
    };
    back(p.base.q, r.dq);
    back(p.base.k, r.dk);
    if constexpr (is_sum_base_v<std::decay_t<base_t>>) {
      back(p.base.q2, r.dq2);
      back(p.base.k2, r.dk2);
    }
  }
  return r;
}

}  // namespace xattn
