#pragma once
// grad(e, f, d_out): the fused backward of an attention expression. f = eval_with_lse(e) supplies
// the output and each row's log-sum-exp; nothing of size Sq x Skv is allocated (except for the
// gradient of a bias tensor, which is that size before its broadcast axes are summed).
#include "backward.hpp"
#include "eval.hpp"
#include "policy_backward.hpp"

#include <type_traits>

namespace xattn {

template <class DQ, class DK, class DV, class DX, class DScore, class Acc>
struct gradients {
  DQ dq;                               // in the shape of Q (packed heads(): the packed shape); empty for score tensors
  DK dk;                               // in the shape of K
  DV dv;                               // in the shape of V
  DX dx;                               // score tensor X's gradient, in its shape; empty for Q, K
  DScore dscore;                       // the scoring policy's parameter gradients (policy/gradient.hpp)
  std::vector<xt::xarray<Acc>> dbias;  // one per bias(t) term, in order, in t's shape
  std::vector<learned_gradients> dmodify;  // one per modify(s, op) whose op lists learnables, in order
};

namespace detail {

/// Whether the backward differentiates modifier Op: its derivative on dual numbers, and its
/// learnables (if it lists them) on the tape.
template <class Op, class Acc>
constexpr bool modifier_differentiable() {
  if constexpr (declares_learnables<Op>)
    return modifies_in<Op, dual<Acc>> && modifies_in<Op, var<Acc>>;
  else
    return modifies_in<Op, dual<Acc>>;
}

template <class Acc, class Ops>
inline constexpr bool all_differentiable_v = false;
template <class Acc, class... Op>
inline constexpr bool all_differentiable_v<Acc, hana::tuple<Op...>> = (modifier_differentiable<Op, Acc>() && ...);
template <class Ops>
inline constexpr bool all_parameters_checked_v = false;
template <class... Op>
inline constexpr bool all_parameters_checked_v<hana::tuple<Op...>> = (check_parameters<Op>() && ...);

template <class Plan>
constexpr bool scores_have_fused_backward() {
  using base_t = decltype(std::declval<Plan>().base);
  if constexpr (base_t::tensor_scores)
    return true;
  else
    return differentiable_in<typename base_t::policy_type, acc_t<Plan>>();
}

/// Whether grad() runs on plans of this type (check_backward says why not).
template <class Plan>
inline constexpr bool has_fused_backward_v =
    Plan::has_values&& scores_have_fused_backward<Plan>() &&
    all_differentiable_v<acc_t<Plan>, std::decay_t<decltype(std::declval<Plan>().ops)>>;

template <class Plan, class Acc>
constexpr bool check_backward() {
  static_assert(Plan::has_values,
                "xattn: grad(e, f, d_out) needs an attention expression softmax(...) * V (f = eval_with_lse(e))");
  using base_t = decltype(std::declval<Plan>().base);
  if constexpr (!base_t::tensor_scores) {
    using P = typename base_t::policy_type;
    static_assert(differentiable_in<P, Acc>(),
                  "xattn: grad(e, f, d_out): the scoring policy has no gradient. Either write operator()(q, k) "
                  "(and project_query/project_key/combine, if it has them) as templates over the scalar type T, "
                  "calling math functions unqualified (using std::sqrt; sqrt(x)), so that they run on xattn::var "
                  "and xattn::dual, or give it the analytic backward members listed in <xattn/policy/gradient.hpp>");
    check_parameters<P>();
  }
  using Ops = std::decay_t<decltype(std::declval<Plan>().ops)>;
  static_assert(all_differentiable_v<Acc, Ops>,
                "xattn: grad(e): a score modifier must be a template over the score type U, calling math "
                "functions unqualified (using std::tanh; tanh(s)), so that it runs on xattn::dual (and, when it "
                "lists learnables in parameters(), on xattn::var)");
  static_assert(all_parameters_checked_v<Ops>);
  return true;
}

template <class X>
void check_gradient_input(const X& x, const std::vector<std::size_t>& want, const char* what) {
  const std::vector<std::size_t> got(x.shape().begin(), x.shape().end());
  if (got != want) fail("grad(e, f, d_out): ", what, " has shape ", shape_str(got), " but e gives ", shape_str(want));
  if (x.layout() != xt::layout_type::row_major) fail("grad(e, f, d_out): ", what, " must be row-major");
}

/// The gradient tensors' types: Q's, K's, V's and X's result types (empty 4-D ones where absent).
template <class Plan, class Acc>
struct gradient_types {
  using base_t = decltype(std::declval<Plan>().base);
  using none = xt::xtensor<Acc, 4>;
  template <class T>
  using like = result_t<Acc, std::decay_t<T>::rank>;
  static auto pick() {
    if constexpr (base_t::tensor_scores)
      return hana::make_tuple(hana::type_c<none>, hana::type_c<none>, hana::type_c<like<decltype(base_t::x)>>);
    else
      return hana::make_tuple(hana::type_c<like<decltype(base_t::q)>>, hana::type_c<like<decltype(base_t::k)>>,
                              hana::type_c<none>);
  }
  using types = decltype(pick());
  using dq = typename std::decay_t<decltype(hana::at_c<0>(std::declval<types>()))>::type;
  using dk = typename std::decay_t<decltype(hana::at_c<1>(std::declval<types>()))>::type;
  using dx = typename std::decay_t<decltype(hana::at_c<2>(std::declval<types>()))>::type;
  using dv = like<decltype(std::declval<Plan>().v)>;
  static auto parameters() {
    if constexpr (base_t::tensor_scores)
      return std::type_identity<no_parameters>{};
    else
      return std::type_identity<parameter_gradients_t<typename base_t::policy_type>>{};
  }
  using type = gradients<dq, dk, dv, dx, typename decltype(parameters())::type, Acc>;
};

/// A zeroed gradient tensor for an operand of form `how` and kernel shape `shape`, and its layout.
/// Zeroed on the backward's threads: the first touch of a fresh allocation (8 MiB per gradient at
/// (1, 8, 2048, 128)) took 4 % of a two-thread backward on one thread.
template <class R>
layout<4> zero_gradient(R& r, form how, const std::array<std::size_t, 4>& shape, int threads = 1) {
  layout<4> at;
  std::tie(r, at) = allocate_in<R>(how, shape);
  using T = typename R::value_type;
  constexpr std::size_t piece = std::size_t(1) << 16;
  T* const data = r.data();
  const std::size_t size = r.size(), pieces = (size + piece - 1) / piece;
#pragma omp parallel for num_threads(threads) if (threads > 1 && pieces > 1) schedule(static)
  for (std::size_t k = 0; k < pieces; ++k)  // blocks masks hide are never visited
    std::fill(data + k * piece, data + std::min(size, k * piece + piece), T(0));
  return at;
}

/// The backward of a plan whose scores come from Q and K (Q * trans(K) or score(policy, Q, K)):
/// writes dq, dk, dv (kernel coordinates) and adds into the bias gradients and the policy's
/// parameter gradients (context parallelism adds every block's). `exact` as in run_backward.
template <class Acc, class Plan, class DO, class O>
backward_report run_qk_backward(const Plan& p, const problem& pr, const schedule& sch,
                                const strided_view<const DO>& d_out, const strided_view<const O>& out,
                                const strided_view<const Acc, 3>& lse, const strided_view<Acc>& dq,
                                const strided_view<Acc>& dk, const strided_view<Acc>& dv,
                                std::vector<xt::xarray<Acc>>& dbias, std::vector<learned_gradients>& dmodify,
                                parameter_gradients_t<typename decltype(p.base)::policy_type>& dscore,
                                const std::pair<Acc, Acc>* exact = nullptr) {
  if constexpr (std::is_same_v<typename decltype(p.base)::policy_type, dot>) {
    const backward_schedule bs =
        resolve_backward(sch, pr, pr.q_dim, simd::width<Acc>, kernel::strip_width<Acc>, sizeof(Acc));
    const dot_source<decltype(p.base.q.view), decltype(p.base.k.view)> src{p.base.q.view, p.base.k.view, pr.q_dim};
    return run_backward<Acc>(p, pr, bs, src, d_out, out, lse,
                             backward_out<Acc, Acc>{dq, dk, dv, {}, {}, {}, {}, &dbias, &dmodify}, exact);
  } else {
    return run_policy_backward<Acc>(p, pr, sch, d_out, out, lse, dq, dk, dv, dbias, dmodify, dscore, exact);
  }
}

template <class Acc, class Plan, class F, class DOut>
auto run_grad(const Plan& p, const F& f, const DOut& d_out, const schedule& sch) {
  using DO = std::remove_cv_t<typename DOut::value_type>;
  using O = std::remove_cv_t<typename decltype(f.output)::value_type>;
  using L = std::remove_cv_t<typename decltype(f.lse)::value_type>;
  static_assert(is_element_v<DO> && is_element_v<O>,
                "xattn: grad(e, f, d_out): d_out and f.output hold float or double");
  static_assert(std::is_same_v<L, Acc>,
                "xattn: grad(e, f, d_out): f must be eval_with_lse(e): its lse holds e's accumulator type");
  using base_t = decltype(p.base);
  const auto& lt = lead_terminal(p.base);
  const problem pr = resolve(p);
  const formed of = in_form(lt.how, {pr.batch, pr.q_heads, pr.q_len, pr.v_dim});
  check_gradient_input(d_out, of.user_shape, "d_out");
  check_gradient_input(f.output, of.user_shape, "f.output (f must be eval_with_lse(e))");
  const auto [lse_shape, lse_at] = lse_form(lt.how, pr);
  check_gradient_input(f.lse, lse_shape, "f.lse (f must be eval_with_lse(e))");

  typename gradient_types<Plan, Acc>::type g;
  const double flop =
      2.0 * double(pr.batch * pr.q_heads * pr.q_len) * double(pr.kv_len) * double(3 * pr.q_dim + 2 * pr.v_dim);
  const int threads = resolve_threads(sch, flop, machine::here()).first;
  layout<4> dq_at, dk_at, dx_at;
  if constexpr (base_t::tensor_scores) {
    dx_at = zero_gradient(g.dx, lt.how, {pr.batch, pr.q_heads, pr.q_len, pr.kv_len}, threads);
  } else {
    dq_at = zero_gradient(g.dq, lt.how, {pr.batch, pr.q_heads, pr.q_len, pr.q_dim}, threads);
    dk_at = zero_gradient(g.dk, p.base.k.how, {pr.batch, pr.kv_heads, pr.kv_len, pr.k_dim}, threads);
  }
  const layout<4> dv_at = zero_gradient(g.dv, p.v.how, {pr.batch, pr.kv_heads, pr.kv_len, pr.v_dim}, threads);

  const strided_view<const DO> dov{d_out.data(), of.at};
  const strided_view<const O> ov{f.output.data(), of.at};
  const strided_view<const Acc, 3> lv{f.lse.data(), lse_at};
  const strided_view<Acc> dq{g.dq.data(), dq_at}, dk{g.dk.data(), dk_at}, dv{g.dv.data(), dv_at},
      dx{g.dx.data(), dx_at};
  backward_report rep;
  if constexpr (base_t::tensor_scores) {
    const backward_schedule bs = resolve_backward(sch, pr, 0, simd::width<Acc>, kernel::strip_width<Acc>, sizeof(Acc));
    rep = run_backward<Acc>(p, pr, bs, tensor_source{}, dov, ov, lv,
                            backward_out<Acc, Acc>{{}, {}, dv, dx, {}, {}, {}, &g.dbias, &g.dmodify});
  } else {
    g.dscore = zero_parameter_gradients(p.base.policy);
    rep = run_qk_backward<Acc>(p, pr, sch, dov, ov, lv, dq, dk, dv, g.dbias, g.dmodify, g.dscore);
  }
  // the probabilities recomputed from f.lse must sum to 1: a log-sum-exp of another expression
  // (or other inputs) would give silently wrong gradients
  const double tol = std::is_same_v<Acc, float> ? 1e-3 : 1e-9;
  if (rep.worst_row_sum_error > tol)
    fail("grad(e, f, d_out): f.lse does not belong to e: with it a row's probabilities sum to 1 +- ",
         rep.worst_row_sum_error, "; f must be eval_with_lse(e) of this expression and these inputs");
  return g;
}

}  // namespace detail

/// Gradients of sum(d_out ∘ output) with respect to Q, K, V (or X), bias tensors and the scoring
/// policy's parameters, given f = eval_with_lse(e). Results hold the accumulator type, each in
/// the shape (and form) of its operand.
template <expression E, class F, class DOut>
auto grad(const E& e, const F& f, const DOut& d_out, const schedule& sch = {}) {
  if constexpr (check_grammar<E>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    using Acc = detail::acc_t<P>;
    if constexpr (detail::check_backward<P, Acc>()) return detail::run_grad<Acc>(p, f, d_out, sch);
  }
}

}  // namespace xattn
