#pragma once
// What every entry point shares, in one process or over MPI: the result types, the checks of
// what the user hands in, and the allocation of results in the user's forms. attention_with_lse
// and gradients_of each take the computation as an argument, so eval_with_lse and grad and their
// mpi::context counterparts run through the same function.
#include "../../error.hpp"
#include "../../hana.hpp"
#include "../../learnable.hpp"
#include "../../policy/gradient.hpp"
#include "../../types.hpp"
#include "../backward/backward.hpp"
#include "../backward/term_grads.hpp"
#include "../plan/bias_terms.hpp"
#include "../plan/types.hpp"
#include "partial.hpp"
#include "result.hpp"

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <vector>

namespace xattn {

/// True for a valid output element type (void: the accumulator's), one static_assert otherwise.
template <class Out>
constexpr bool check_output_type() {
  static_assert(std::is_void_v<Out> || is_element_v<Out>,
                "xattn: eval<T>(e): the output type T must be float, double, xattn::bfloat16 or xattn::float16");
  return true;
}

/// The user shape of the per-row log-sum-exp for a lead terminal in form f -- (B, Sq), (B, H, Sq),
/// or (B, Sq, H) for packed heads -- and its row-major layout in (B, H, Sq) coordinates.
inline std::pair<std::vector<std::size_t>, layout<3>> lse_form(form f, const problem& pr) {
  formed lf = in_form(f, {pr.batch, pr.q_heads, pr.q_len, 1});  // (B, Sq, 1), (B, H, Sq, 1) or (B, Sq, H)
  if (f != form::packed) lf.user_shape.pop_back();
  return {lf.user_shape, {{pr.batch, pr.q_heads, pr.q_len}, {lf.at.stride[0], lf.at.stride[1], lf.at.stride[2]}}};
}

/// What eval_with_lse returns for plan type Plan and output element Out.
template <class Out, class Plan>
using attention_with_lse_t = partial_attention<
    result_t<output_element_t<Out, Plan>, lead_terminal_t<Plan>::rank>,
    result_t<accumulator_of_t<Plan>, lead_terminal_t<Plan>::rank == 0 ? 0
                                     : lead_terminal_t<Plan>::packed  ? 3
                                                                      : lead_terminal_t<Plan>::rank - 1>>;

/// The output and log-sum-exp of plan p's attention over the rows of problem pr, allocated in the
/// form of its lead terminal; compute(out, lse), views in kernel coordinates, fills them.
template <class Out, class Plan, class Compute>
attention_with_lse_t<Out, Plan> attention_with_lse(const Plan& p, const problem& pr, Compute&& compute) {
  using O = output_element_t<Out, Plan>;
  using Acc = accumulator_of_t<Plan>;
  const form how = lead_terminal(p.base).how;
  attention_with_lse_t<Out, Plan> r;
  layout<4> at;
  std::tie(r.output, at) = allocate_in<decltype(r.output)>(how, {pr.batch, pr.q_heads, pr.q_len, pr.v_dim});
  const auto [lse_shape, lse_at] = lse_form(how, pr);
  r.lse = allocate<decltype(r.lse)>(lse_shape);
  compute(strided_view<O>{r.output.data(), at}, strided_view<Acc, 3>{r.lse.data(), lse_at});
  return r;
}

template <class DQ, class DK, class DV, class DX, class DScore, class Acc, class DQ2 = xt::xtensor<Acc, 4>,
          class DK2 = xt::xtensor<Acc, 4>>
struct gradients {
  DQ dq;                               // in the shape of Q (packed heads(): the packed shape); empty for score tensors
  DK dk;                               // in the shape of K
  DQ2 dq2;                             // Q1 * trans(K1) + Q2 * trans(K2): Q2's gradient; else empty
  DK2 dk2;                             // and K2's
  DV dv;                               // in the shape of V
  DX dx;                               // score tensor X's gradient, in its shape; empty for Q, K
  DScore dscore;                       // the scoring policy's parameter gradients (policy/gradient.hpp)
  std::vector<xt::xarray<Acc>> dbias;  // one per bias(t) term, in order, in t's shape
  std::vector<learned_gradients> dmodify;  // one per modify(s, op) whose op lists learnables, in order
  xt::xtensor<Acc, 1> dsinks;              // the softmax term's parameters: (Hq) for sinks(t); else empty
};

namespace detail {

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
  static auto second() {
    if constexpr (is_sum_base_v<base_t>)
      return hana::make_tuple(hana::type_c<like<decltype(base_t::q2)>>, hana::type_c<like<decltype(base_t::k2)>>);
    else
      return hana::make_tuple(hana::type_c<none>, hana::type_c<none>);
  }
  using dq2 = typename std::decay_t<decltype(hana::at_c<0>(second()))>::type;
  using dk2 = typename std::decay_t<decltype(hana::at_c<1>(second()))>::type;
  using type = gradients<dq, dk, dv, dx, typename decltype(parameters())::type, Acc, dq2, dk2>;
};

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
    return differentiable_in<typename base_t::policy_type, accumulator_of_t<Plan>>();
}

}  // namespace detail

/// What grad returns for plan type Plan.
template <class Plan>
using gradients_t = typename detail::gradient_types<Plan, accumulator_of_t<Plan>>::type;

/// Whether grad() runs on plans of this type (check_backward says why not).
template <class Plan>
inline constexpr bool has_fused_backward_v =
    Plan::has_values&& detail::scores_have_fused_backward<Plan>() &&
    detail::all_differentiable_v<accumulator_of_t<Plan>, std::decay_t<decltype(std::declval<Plan>().ops)>>;

/// True for a plan grad() differentiates; otherwise the first static_assert says why not.
template <class Plan>
constexpr bool check_backward() {
  using Acc = accumulator_of_t<Plan>;
  static_assert(Plan::has_values,
                "xattn: grad(e, f, d_out) needs an attention expression softmax(...) * V (f = eval_with_lse(e))");
  static_assert(!reads_cache_v<Plan>,
                "xattn: grad(e, f, d_out): keys and values read from a kv_cache are for inference; to train, "
                "attend ref() tensors of the same rows (cache.stored_keys(id), cache.stored_values(id))");
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
  static_assert(detail::all_differentiable_v<Acc, Ops>,
                "xattn: grad(e): a score modifier must be a template over the score type U, calling math "
                "functions unqualified (using std::tanh; tanh(s)), so that it runs on xattn::dual (and, when it "
                "lists learnables in parameters(), on xattn::var)");
  static_assert(detail::all_parameters_checked_v<Ops>);
  return true;
}

namespace detail {

template <class X>
void check_gradient_input(const X& x, const std::vector<std::size_t>& want, const char* who, const char* what) {
  const std::vector<std::size_t> got(x.shape().begin(), x.shape().end());
  if (got != want) fail(who, ": ", what, " has shape ", shape_str(got), " but e gives ", shape_str(want));
  if (x.layout() != xt::layout_type::row_major) fail(who, ": ", what, " must be row-major");
}

/// A zeroed gradient tensor for an operand of form `how` and kernel shape `shape`, and its layout.
/// Zeroed on the backward's threads: the first touch of a fresh allocation is a pass over memory
/// worth sharing.
template <class R>
layout<4> zero_gradient(R& r, form how, const std::array<std::size_t, 4>& shape, [[maybe_unused]] int threads) {
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

}  // namespace detail

namespace detail {

/// The rest of a backward once dQ, dK (or dX) and dV have zeroed targets in `out`: every bias and
/// learnable gradient created in g, compute(in, out) run, the softmax term's gradient taken.
template <class Plan, class Acc, class DO, class O, class DScore, class Compute>
void complete_gradients(const Plan& p, const problem& pr, const backward_inputs<Acc, DO, O>& in,
                        backward_outputs<Acc, DScore>& out, gradients_t<Plan>& g, Compute&& compute) {
  hana::for_each(p.ops, [&](const auto& op) {  // every bias and learnable, even where masks hide everything
    using Op = std::decay_t<decltype(op)>;
    if constexpr (is_tensor_bias_v<Op>) g.dbias.push_back(xt::zeros<Acc>(bias_term(op).tensor.shape));
    if constexpr (declares_learnables<Op>) g.dmodify.push_back(parameter_slots(op).zeros());
  });
  out.dbias = &g.dbias, out.dmodify = &g.dmodify, out.dscore = &g.dscore;
  compute(in, out);
  if constexpr (Plan::has_term) g.dsinks = term_gradients(p.term, pr, in);
}

}  // namespace detail

namespace detail {

/// The fused backward, refusing an lse that does not belong to the expression: with it the
/// recomputed probabilities would not sum to 1 and the gradients would be silently wrong.
template <class Plan, class In, class Out>
void checked_backward(const Plan& p, const problem& pr, const backward_schedule& bs, const In& in, const Out& out,
                      const char* who, const char* lse_name, const char* advice) {
  using Acc = accumulator_of_t<Plan>;
  const backward_report rep = run_backward<Acc>(p, pr, bs, in, out);
  const double tol = std::is_same_v<Acc, float> ? 1e-3 : 1e-9;
  if (rep.worst_row_sum_error > tol)
    fail(who, ": ", lse_name, " does not belong to e: with it a row's probabilities sum to 1 +- ",
         rep.worst_row_sum_error, "; ", advice);
}

}  // namespace detail

/// Checks grad's inputs against plan p over the rows of problem pr: f = eval_with_lse(e) and d_out
/// in the shapes e gives, row-major, of the right types. `who` names the entry in messages.
template <class Plan, class F, class DOut>
void check_gradient_inputs(const Plan& p, const problem& pr, const F& f, const DOut& d_out, const char* who) {
  using DO = std::remove_cv_t<typename DOut::value_type>;
  using O = std::remove_cv_t<typename decltype(f.output)::value_type>;
  using L = std::remove_cv_t<typename decltype(f.lse)::value_type>;
  static_assert(is_element_v<DO> && is_element_v<O>,
                "xattn: grad(e, f, d_out): d_out and f.output hold float, double, xattn::bfloat16 or xattn::float16");
  static_assert(std::is_same_v<L, accumulator_of_t<Plan>>,
                "xattn: grad(e, f, d_out): f must be eval_with_lse(e): its lse holds e's accumulator type");
  const form how = lead_terminal(p.base).how;
  const formed of = in_form(how, {pr.batch, pr.q_heads, pr.q_len, pr.v_dim});
  detail::check_gradient_input(d_out, of.user_shape, who, "d_out");
  detail::check_gradient_input(f.output, of.user_shape, who, "f.output (f must be eval_with_lse(e))");
  detail::check_gradient_input(f.lse, lse_form(how, pr).first, who, "f.lse (f must be eval_with_lse(e))");
}

/// The gradients of plan p over the rows of problem pr: every tensor allocated zeroed in its
/// operand's form (on `threads` threads), every bias and learnable gradient created, then
/// compute(inputs, outputs) -- backward_inputs and backward_outputs in kernel coordinates -- fills
/// them. The inputs must have passed check_gradient_inputs.
template <class Plan, class F, class DOut, class Compute>
gradients_t<Plan> gradients_of(const Plan& p, const problem& pr, const F& f, const DOut& d_out, int threads,
                               Compute&& compute) {
  using Acc = accumulator_of_t<Plan>;
  using DO = std::remove_cv_t<typename DOut::value_type>;
  using O = std::remove_cv_t<typename decltype(f.output)::value_type>;
  using base_t = decltype(p.base);
  const form how = lead_terminal(p.base).how;
  const formed of = in_form(how, {pr.batch, pr.q_heads, pr.q_len, pr.v_dim});
  gradients_t<Plan> g;
  using DScore = decltype(g.dscore);
  backward_outputs<Acc, DScore> out{};
  if constexpr (base_t::tensor_scores) {
    out.to.dx = {nullptr, detail::zero_gradient(g.dx, how, {pr.batch, pr.q_heads, pr.q_len, pr.kv_len}, threads)};
    out.to.dx.data = g.dx.data();
  } else {
    g.dscore = zero_parameter_gradients(p.base.policy);
    out.to.dq = {nullptr, detail::zero_gradient(g.dq, how, {pr.batch, pr.q_heads, pr.q_len, pr.q_dim}, threads)};
    out.to.dk = {nullptr,
                 detail::zero_gradient(g.dk, p.base.k.how, {pr.batch, pr.kv_heads, pr.kv_len, pr.k_dim}, threads)};
    out.to.dq.data = g.dq.data(), out.to.dk.data = g.dk.data();
    if constexpr (is_sum_base_v<base_t>) {
      const auto& q2 = p.base.q2.view.at.shape;
      const auto& k2 = p.base.k2.view.at.shape;
      out.to.dq2 = {nullptr, detail::zero_gradient(g.dq2, p.base.q2.how, {q2[0], q2[1], q2[2], q2[3]}, threads)};
      out.to.dk2 = {nullptr, detail::zero_gradient(g.dk2, p.base.k2.how, {k2[0], k2[1], k2[2], k2[3]}, threads)};
      out.to.dq2.data = g.dq2.data(), out.to.dk2.data = g.dk2.data();
    }
  }
  out.dv = {nullptr, detail::zero_gradient(g.dv, p.v.how, {pr.batch, pr.kv_heads, pr.kv_len, pr.v_dim}, threads)};
  out.dv.data = g.dv.data();
  const backward_inputs<Acc, DO, O> in{
      {d_out.data(), of.at}, {f.output.data(), of.at}, {f.lse.data(), lse_form(how, pr).second}, nullptr};
  detail::complete_gradients(p, pr, in, out, g, compute);
  return g;
}

}  // namespace xattn
