#pragma once
// grad(e, f, d_out): the fused backward of an attention expression. f = eval_with_lse(e) supplies
// the output and each row's log-sum-exp; nothing of size Sq x Skv is allocated (except for the
// gradient of a bias tensor, which is that size before its broadcast axes are summed).
#include "../backward/backward.hpp"
#include "../paths/select.hpp"
#include "../plan/resolve.hpp"
#include "eval.hpp"
#include "grad_selected.hpp"
#include "plumbing.hpp"

#include <array>
#include <initializer_list>
#include <type_traits>

namespace xattn {

namespace detail {

/// Zero every element of a strided (B, H, S, D) view.
template <class T>
void zero_strided(const strided_view<T>& v) {
  const auto& n = v.at.shape;
  for (std::size_t b = 0; b < n[0]; ++b)
    for (std::size_t h = 0; h < n[1]; ++h)
      for (std::size_t s = 0; s < n[2]; ++s) {
        T* row = v.row(b, h, s);
        for (std::size_t d = 0; d < n[3]; ++d) row[std::ptrdiff_t(d) * v.inner_stride()] = T(0);
      }
}

/// An operand gradient tensor's type holding Out instead.
template <class Out, class T>
struct retyped;
template <class Out, class A, std::size_t N, xt::layout_type L>
struct retyped<Out, xt::xtensor<A, N, L>> {
  using type = xt::xtensor<Out, N>;
};
template <class Out, class A, xt::layout_type L>
struct retyped<Out, xt::xarray<A, L>> {
  using type = xt::xarray<Out>;
};
template <class Out, class T>
using retyped_t = typename retyped<Out, T>::type;

/// The gradients of the operands (Q, K, V, X, and the second product's) rounded once to Out;
/// the others (bias, policy, modifier, sink gradients) keep the accumulator type.
template <class Out, class DQ, class DK, class DV, class DX, class DScore, class Acc, class DQ2, class DK2>
auto gradients_as(gradients<DQ, DK, DV, DX, DScore, Acc, DQ2, DK2>&& g) {
  if constexpr (std::is_void_v<Out> || std::is_same_v<Out, Acc>) {
    return std::move(g);
  } else {
    const auto as = [](const auto& t) { return retyped_t<Out, std::decay_t<decltype(t)>>(xt::cast<Out>(t)); };
    using R = gradients<retyped_t<Out, DQ>, retyped_t<Out, DK>, retyped_t<Out, DV>, retyped_t<Out, DX>, DScore, Acc,
                        retyped_t<Out, DQ2>, retyped_t<Out, DK2>>;
    return R{.dq = as(g.dq),
             .dk = as(g.dk),
             .dq2 = as(g.dq2),
             .dk2 = as(g.dk2),
             .dv = as(g.dv),
             .dx = as(g.dx),
             .dscore = std::move(g.dscore),
             .dbias = std::move(g.dbias),
             .dmodify = std::move(g.dmodify),
             .dsinks = std::move(g.dsinks)};
  }
}

}  // namespace detail

/// Gradients of sum(d_out ∘ output) with respect to Q, K, V (or X), bias tensors and the scoring
/// policy's parameters, given f = eval_with_lse(e). Results hold the accumulator type, each in
/// the shape (and form) of its operand; grad<Out> rounds the operands' gradients (dQ, dK, dV or
/// dX) to Out once at the end, as eval<Out> does the output (grad<bfloat16> for a bf16 training
/// step); the other gradients keep the accumulator type.
template <class Out = void, expression E, class F, class DOut>
auto grad(const E& e, const F& f, const DOut& d_out, const schedule& sch = {}) {
  if constexpr (check_grammar<E>() && check_output_type<Out>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    if constexpr (check_backward<P>() && selects_v<P>) {
      static_assert(!is_cache_terminal_v<std::decay_t<decltype(p.base.k.from)>>,
                    "xattn: grad(e, f, d_out): keys and values read from a kv_cache are for inference; to train, "
                    "select from ref() tensors of the same rows (cache.stored_keys(id), cache.stored_values(id))");
      return detail::gradients_as<Out>(detail::grad_selected(p, resolve(p), f, d_out, sch, "grad(e, f, d_out)"));
    } else if constexpr (check_backward<P>()) {
      const problem pr = resolve(p);
      check_gradient_inputs(p, pr, f, d_out, "grad(e, f, d_out)");
      const backward_schedule bs = schedule_for(p, pr, sch, pass_kind::attention).backward;
      return detail::gradients_as<Out>(gradients_of(p, pr, f, d_out, bs.threads, [&](const auto& in, const auto& out) {
        detail::checked_backward(p, pr, bs, in, out, "grad(e, f, d_out)", "f.lse",
                                 "f must be eval_with_lse(e) of this expression and these inputs");
      }));
    }
  }
}

/// A strided tensor in caller memory: shape and element strides in kernel coordinates (any order).
template <class T, std::size_t N>
struct raw_tensor {
  T* data = nullptr;
  std::array<std::size_t, N> shape{};
  std::array<std::ptrdiff_t, N> strides{};
};

/// grad on raw memory, for callers that own every buffer (the C interface, bindings): the
/// forward's output and lse (as eval_with_lse_into wrote them) and d_out in, dQ, dK and dV written
/// in the accumulator type, all seen as (B, H, S, D) or (B, Hq, Sq). Every buffer is checked
/// before anything is written (except that an lse of other inputs is noticed only by the pass,
/// which then zeroes the gradients); the gradients may not overlap an operand or each other. Returns
/// grad's result with dq, dk and dv left empty (bias, policy, modifier and sink gradients in it).
template <expression E, element O, element DO, class Acc>
auto grad_into(const E& e, raw_tensor<const O, 4> out, raw_tensor<const Acc, 3> lse, raw_tensor<const DO, 4> d_out,
               raw_tensor<Acc, 4> dq, raw_tensor<Acc, 4> dk, raw_tensor<Acc, 4> dv, const schedule& sch = {}) {
  if constexpr (check_grammar<E>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    using base_t = decltype(p.base);
    static_assert(!base_t::tensor_scores && !is_sum_base_v<base_t> && !selects_v<P>,
                  "xattn: grad_into(e, ...) takes Q * trans(K) or score(policy, Q, K) expressions; for a score "
                  "tensor, a sum of products or selected keys use grad(e, f, d_out)");
    static_assert(std::is_same_v<Acc, accumulator_of_t<P>>,
                  "xattn: grad_into: lse and the gradients hold the accumulator type (float; double if an operand "
                  "is double)");
    if constexpr (check_backward<P>() && !base_t::tensor_scores && !is_sum_base_v<base_t> && !selects_v<P> &&
                  std::is_same_v<Acc, accumulator_of_t<P>>) {
      const char* who = "grad_into(e, out, lse, d_out, dq, dk, dv)";
      const problem pr = resolve(p);
      const std::array<std::size_t, 4> rows{pr.batch, pr.q_heads, pr.q_len, pr.v_dim};
      const auto input = [&](const auto& t, const auto& want, const char* what) {
        if (t.shape != want) fail(who, ": ", what, " shape ", shape_str(t.shape), " but e gives ", shape_str(want));
        const layout<std::tuple_size_v<std::decay_t<decltype(want)>>> at{t.shape, t.strides};
        if (at.reach().first <= at.reach().second && t.data == nullptr) fail(who, ": ", what, " data is null");
        return at;
      };
      const layout<4> out_at = input(out, rows, "out");
      const layout<3> lse_at = input(lse, std::array<std::size_t, 3>{pr.batch, pr.q_heads, pr.q_len}, "lse");
      const layout<4> dout_at = input(d_out, rows, "d_out");
      const detail::raw_extent r0 = detail::extent_of(out.data, out_at, "output");
      const detail::raw_extent r1 = detail::extent_of(lse.data, lse_at, "lse");
      const detail::raw_extent r2 = detail::extent_of(d_out.data, dout_at, "d_out");
      const layout<4> dq_at =
          detail::checked_raw_output(p, dq.data, dq.shape, dq.strides, {pr.batch, pr.q_heads, pr.q_len, pr.q_dim}, who,
                                     {"dq", "gradient of Q is"}, {r0, r1, r2});
      const detail::raw_extent dq_x = detail::extent_of(dq.data, dq_at, "dq");
      const layout<4> dk_at =
          detail::checked_raw_output(p, dk.data, dk.shape, dk.strides, {pr.batch, pr.kv_heads, pr.kv_len, pr.k_dim},
                                     who, {"dk", "gradient of K is"}, {r0, r1, r2, dq_x});
      const layout<4> dv_at = detail::checked_raw_output(
          p, dv.data, dv.shape, dv.strides, {pr.batch, pr.kv_heads, pr.kv_len, pr.v_dim}, who,
          {"dv", "gradient of V is"}, {r0, r1, r2, dq_x, detail::extent_of(dk.data, dk_at, "dk")});
      backward_schedule bs = schedule_for(p, pr, sch, pass_kind::attention).backward;
      // the planner accumulates dQ in place only in Q's own dense form, which caller memory may not have
      if (bs.dq_in_place && dq_at.stride != layout<4>::row_major(dq.shape).stride) bs.dq_in_place = false;
      gradients_t<P> g;
      g.dscore = zero_parameter_gradients(p.base.policy);
      backward_outputs<Acc, decltype(g.dscore)> to{};
      to.to.dq = {dq.data, dq_at}, to.to.dk = {dk.data, dk_at}, to.dv = {dv.data, dv_at};
      for (const auto& v : {to.to.dq, to.to.dk, to.dv}) detail::zero_strided(v);
      const backward_inputs<Acc, DO, O> in{{d_out.data, dout_at}, {out.data, out_at}, {lse.data, lse_at}, nullptr};
      // An lse of other inputs shows only in the pass's row sums: the gradients are then zeroed
      // (not left half written), the one refusal that comes after writing.
      try {
        detail::complete_gradients(p, pr, in, to, g, [&](const auto& i, const auto& o) {
          detail::checked_backward(p, pr, bs, i, o, who, "lse",
                                   "out and lse must be what eval_with_lse_into wrote for e and these inputs (dq, "
                                   "dk and dv are zeroed)");
        });
      } catch (...) {
        for (const auto& v : {to.to.dq, to.to.dk, to.dv}) detail::zero_strided(v);
        throw;
      }
      return g;
    }
  }
}

}  // namespace xattn
