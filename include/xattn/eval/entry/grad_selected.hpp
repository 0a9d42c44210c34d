#pragma once
// grad over selected keys (select(K, idx)): as the forward, one backward pass per query position i
// over the k rows selected for it, its dK and dV rows (k of them) then added into the rows of K
// and V they were selected from -- a key chosen by several queries gathers all their gradients.
#include "../backward/backward.hpp"
#include "../backward/term_grads.hpp"
#include "../forward/selected.hpp"
#include "plumbing.hpp"

#include <utility>

namespace xattn::detail {

template <class Plan, class F, class DOut>
gradients_t<Plan> grad_selected(const Plan& p, const problem& pr, const F& f, const DOut& d_out, const schedule& sch,
                                const char* who) {
  using Acc = accumulator_of_t<Plan>;
  using DO = std::remove_cv_t<typename DOut::value_type>;
  using O = std::remove_cv_t<typename decltype(f.output)::value_type>;
  check_gradient_inputs(p, pr, f, d_out, who);
  check_selected(p, pr, who);
  const resolved_schedule whole = schedule_for(p, pr, sch, pass_kind::attention);
  const int threads = whole.backward.threads;
  const form how = lead_terminal(p.base).how;
  const formed of = in_form(how, {pr.batch, pr.q_heads, pr.q_len, pr.v_dim});
  const auto& ks = p.base.k.from.view.at.shape;
  const auto& vs = p.v.from.view.at.shape;
  gradients_t<Plan> g;
  g.dscore = zero_parameter_gradients(p.base.policy);
  const layout<4> dq_at = zero_gradient(g.dq, how, {pr.batch, pr.q_heads, pr.q_len, pr.q_dim}, threads);
  const layout<4> dk_at = zero_gradient(g.dk, form::bhsd, {ks[0], ks[1], ks[2], ks[3]}, threads);
  const layout<4> dv_at = zero_gradient(g.dv, form::bhsd, {vs[0], vs[1], vs[2], vs[3]}, threads);
  // each position's dK and dV rows, (B, Hkv, k, D), before they are added where they were selected from
  const layout<4> dks_at = layout<4>::row_major({pr.batch, pr.kv_heads, pr.kv_len, pr.k_dim}),
                  dvs_at = layout<4>::row_major({pr.batch, pr.kv_heads, pr.kv_len, pr.v_dim});
  std::vector<Acc> dks(dks_at.size()), dvs(dvs_at.size());
  const backward_inputs<Acc, DO, O> all{
      {d_out.data(), of.at}, {f.output.data(), of.at}, {f.lse.data(), lse_form(how, pr).second}, nullptr};
  Plan one = p;
  problem at_i = pr;
  at_i.q_len = 1;
  backward_schedule bs = schedule_for(one, at_i, selected_schedule(whole.forward), pass_kind::attention).backward;
  bs.dq_in_place = false;  // dQ's rows of one position are not a dense tensor of their own
  const auto& ix = p.base.k.view.idx;
  for (std::size_t i = 0; i < pr.q_len; ++i) {
    at_position(one, p, i);
    const auto row_of = [i](auto v) {  // the (B, H, 1, ·) or (B, H, 1) part of position i
      v.data += std::ptrdiff_t(i) * v.at.stride[2];
      v.at.shape[2] = 1;
      return v;
    };
    std::fill(dks.begin(), dks.end(), Acc(0));
    std::fill(dvs.begin(), dvs.end(), Acc(0));
    backward_outputs<Acc, decltype(g.dscore)> out{};
    out.to.dq = row_of(strided_view<Acc>{g.dq.data(), dq_at});
    out.to.dk = {dks.data(), dks_at};
    out.dv = {dvs.data(), dvs_at};
    out.dscore = &g.dscore;
    const backward_inputs<Acc, DO, O> in{row_of(all.d_out), row_of(all.out), row_of(all.lse), nullptr};
    checked_backward(std::as_const(one), at_i, bs, in, out, who, "f.lse",
                     "f must be eval_with_lse(e) of this expression and these inputs");
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (std::size_t bh = 0; bh < pr.batch * pr.kv_heads; ++bh) {  // rows of one (b, h) meet only each other
      const std::size_t b = bh / pr.kv_heads, h = bh % pr.kv_heads;
      for (std::size_t t = 0; t < pr.kv_len; ++t) {
        const auto j = ix(b, h, i, t);
        if (j < 0) continue;
        Acc* dk = g.dk.data() + dk_at(b, h, std::size_t(j), 0);
        Acc* dv = g.dv.data() + dv_at(b, h, std::size_t(j), 0);
        const Acc* sk = dks.data() + dks_at(b, h, t, 0);
        const Acc* sv = dvs.data() + dvs_at(b, h, t, 0);
        for (std::size_t d = 0; d < pr.k_dim; ++d) dk[d] += sk[d];
        for (std::size_t d = 0; d < pr.v_dim; ++d) dv[d] += sv[d];
      }
    }
  }
  if constexpr (Plan::has_term) g.dsinks = term_gradients(p.term, pr, all);
  return g;
}

}  // namespace xattn::detail
