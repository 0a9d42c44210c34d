#pragma once
// The entry points. eval(e [, schedule]): softmax(...) * V runs the fused pass; softmax(...) alone
// returns the weights and a bare score expression the scores, both by the same kernel (two passes
// for the weights). eval_into writes into caller storage, eval_with_lse also returns each row's
// log-sum-exp. Each entry checks the grammar first, so a tree outside it stops with that one
// message.
#include "../../types.hpp"
#include "../forward/fused.hpp"
#include "../paths/select.hpp"
#include "../plan/resolve.hpp"
#include "partial.hpp"
#include "plumbing.hpp"
#include "result.hpp"

#include <type_traits>

namespace xattn {

namespace detail {

template <class Plan>
bool output_overlaps_operands(const Plan& p, const void* lo, const void* hi) {
  bool aliased = p.v.view.overlaps(lo, hi);
  if constexpr (decltype(p.base)::tensor_scores)
    return aliased || p.base.x.view.overlaps(lo, hi);
  else if constexpr (is_sum_base_v<std::decay_t<decltype(p.base)>>)
    return aliased || p.base.q.view.overlaps(lo, hi) || p.base.k.view.overlaps(lo, hi) ||
           p.base.q2.view.overlaps(lo, hi) || p.base.k2.view.overlaps(lo, hi);
  else
    return aliased || p.base.q.view.overlaps(lo, hi) || p.base.k.view.overlaps(lo, hi);
}

}  // namespace detail

/// Evaluate an attention (the fused pass), weights or scores expression. The result holds Out
/// (default: the accumulator type -- float, or double if any operand is double), in the form of Q.
template <class Out = void, expression E>
auto eval(const E& e, const schedule& sch = {}) {
  if constexpr (check_grammar<E>() && check_output_type<Out>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    using Acc = accumulator_of_t<P>;
    using O = output_element_t<Out, P>;
    using lead = lead_terminal_t<P>;
    const auto& lt = lead_terminal(p.base);
    const problem pr = resolve(p);
    if constexpr (P::has_values) {
      const auto rs = schedule_for(p, pr, sch, pass_kind::attention);
      auto [out, at] = allocate_in<result_t<O, lead::rank>>(lt.how, {pr.batch, pr.q_heads, pr.q_len, pr.v_dim});
      run_fused<Acc>(p, pr, rs.forward, strided_view<O>{out.data(), at});
      return out;
    } else {
      constexpr pass_kind kind = detail::is_weights_v<E> ? pass_kind::weights : pass_kind::scores;
      const auto rs = schedule_for(p, pr, sch, kind);
      const form wf = lt.how == form::packed ? form::bhsd : lt.how;  // weights of heads() queries: (B, H, Sq, Skv)
      auto [out, at] =
          allocate_in<result_t<O, lead::packed ? 4 : lead::rank>>(wf, {pr.batch, pr.q_heads, pr.q_len, pr.kv_len});
      run_materialised<Acc>(p, pr, rs.forward, strided_view<O>{out.data(), at});
      return out;
    }
  }
}

/// softmax(...) * V written into caller storage: an xtensor container or adaptor of the shape eval
/// would return, row-major, of element type float or double. No allocation besides the kernel's.
template <expression E, class Out>
void eval_into(const E& e, Out&& out, const schedule& sch = {}) {
  if constexpr (check_grammar<E>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    static_assert(P::has_values, "xattn: eval_into needs an attention expression: softmax(...) * V");
    using O = std::remove_cv_t<typename std::decay_t<Out>::value_type>;
    static_assert(is_element_v<O>,
                  "xattn: eval_into(e, out): out must hold float, double, xattn::bfloat16 or xattn::float16");
    if constexpr (P::has_values && is_element_v<O>) {
      const auto& lt = lead_terminal(p.base);
      const problem pr = resolve(p);
      const formed f = in_form(lt.how, {pr.batch, pr.q_heads, pr.q_len, pr.v_dim});
      if (!std::equal(f.user_shape.begin(), f.user_shape.end(), out.shape().begin(), out.shape().end()))
        fail("eval_into(e, out): out has shape ", shape_str(out.shape()), " but the result is ",
             shape_str(f.user_shape));
      if (out.layout() != xt::layout_type::row_major)
        fail("eval_into(e, out): out must be a contiguous row-major tensor");
      if (detail::output_overlaps_operands(p, out.data(), out.data() + out.size()))
        fail("eval_into(e, out): out ", shape_str(out.shape()),
             " overlaps an operand; the fused pass reads them while writing out");
      run_fused<accumulator_of_t<P>>(p, pr, schedule_for(p, pr, sch, pass_kind::attention).forward,
                                     strided_view<O>{out.data(), f.at});
    }
  }
}

/// softmax(...) * V written into raw caller memory seen as (B, Hq, Sq, Dv) with element strides
/// (any order, any form: e.g. {Sq*H*Dv, Dv, H*Dv, 1} writes packed heads). The strides must not
/// make two elements share an address, and the memory must not overlap an operand.
template <expression E, element O>
void eval_into(const E& e, O* data, std::array<std::size_t, 4> shape, std::array<std::ptrdiff_t, 4> strides,
               const schedule& sch = {}) {
  if constexpr (check_grammar<E>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    static_assert(P::has_values, "xattn: eval_into needs an attention expression: softmax(...) * V");
    if constexpr (P::has_values) {
      const problem pr = resolve(p);
      const std::array<std::size_t, 4> want{pr.batch, pr.q_heads, pr.q_len, pr.v_dim};
      if (shape != want)
        fail("eval_into(e, data, shape, strides): shape ", shape_str(shape), " but the result is (B, Hq, Sq, Dv) ",
             shape_str(want));
      const layout<4> at{shape, strides};
      if (!at.unique())
        fail("eval_into(e, data, shape, strides): strides ", shape_str(strides), " give two elements of shape ",
             shape_str(shape), " the same address");
      const auto [lo, hi] = at.reach();
      if (data == nullptr && hi >= lo) fail("eval_into(e, data, shape, strides): data is null");
      if (hi >= lo && detail::output_overlaps_operands(p, data + lo, data + hi + 1))
        fail(
            "eval_into(e, data, shape, strides): the output overlaps an operand; the fused pass reads them while "
            "writing out");
      run_fused<accumulator_of_t<P>>(p, pr, schedule_for(p, pr, sch, pass_kind::attention).forward,
                                     strided_view<O>{data, at});
    }
  }
}

/// softmax(...) * V with the per-row log-sum-exp of the scores (in the accumulator type), for
/// merging key shards.
template <class Out = void, expression E>
auto eval_with_lse(const E& e, const schedule& sch = {}) {
  if constexpr (check_grammar<E>() && check_output_type<Out>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    static_assert(P::has_values, "xattn: eval_with_lse needs an attention expression: softmax(...) * V");
    if constexpr (P::has_values) {
      const problem pr = resolve(p);
      const auto fs = schedule_for(p, pr, sch, pass_kind::attention).forward;
      return attention_with_lse<Out>(
          p, pr, [&](const auto& out, const auto& lse) { run_fused<accumulator_of_t<P>>(p, pr, fs, out, lse); });
    }
  }
}

}  // namespace xattn
