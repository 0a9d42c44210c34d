#pragma once
// The entry points. eval(e [, schedule]): softmax(...) * V runs the fused pass; softmax(...) alone
// returns the weights and a bare score expression the scores, both by the same kernel (two passes
// for the weights). eval_into writes into caller storage, eval_with_lse also returns each row's
// log-sum-exp, reference(e) runs the double-precision oracle. Each entry checks the grammar
// first, so a tree outside it stops with that one message.
#include "../types.hpp"
#include "fused.hpp"
#include "partial.hpp"
#include "reference.hpp"
#include "result.hpp"

#include <type_traits>

namespace xattn {

namespace detail {

template <class Plan>
using lead_t = std::decay_t<decltype(lead_terminal(std::declval<Plan>().base))>;

template <class T>
using value_of = typename std::decay_t<T>::value_type;

/// The accumulator type of a plan: double if any operand holds double, float otherwise.
template <class Plan>
struct acc_of {
  using base = decltype(std::declval<Plan>().base);
  static auto pick() {
    if constexpr (base::tensor_scores) {
      if constexpr (Plan::has_values)
        return std::type_identity<
            accumulator_t<value_of<decltype(std::declval<base>().x)>, value_of<decltype(std::declval<Plan>().v)>>>{};
      else
        return std::type_identity<accumulator_t<value_of<decltype(std::declval<base>().x)>>>{};
    } else if constexpr (Plan::has_values) {
      return std::type_identity<
          accumulator_t<value_of<decltype(std::declval<base>().q)>, value_of<decltype(std::declval<base>().k)>,
                        value_of<decltype(std::declval<Plan>().v)>>>{};
    } else {
      return std::type_identity<
          accumulator_t<value_of<decltype(std::declval<base>().q)>, value_of<decltype(std::declval<base>().k)>>>{};
    }
  }
  using type = typename decltype(pick())::type;
};
template <class Plan>
using acc_t = typename acc_of<Plan>::type;

/// The element type of a result: Out if given, else the accumulator's.
template <class Out, class Plan>
using out_t = std::conditional_t<std::is_void_v<Out>, acc_t<Plan>, Out>;

template <class Out>
constexpr bool check_output_type() {
  static_assert(std::is_void_v<Out> || is_element_v<Out>,
                "xattn: eval<T>(e): the output type T must be float, double, xattn::bfloat16 or xattn::float16");
  return true;
}

template <class Plan>
resolved_schedule schedule_for(const Plan& p, const problem& pr, const schedule& sch, pass_kind kind) {
  using Acc = acc_t<Plan>;
  using Path = path_t<Acc, std::decay_t<decltype(p.base)>>;
  return resolve_schedule(sch, pr, Path::facts(p.base, pr), kind);
}

template <class Plan>
bool output_overlaps_operands(const Plan& p, const void* lo, const void* hi) {
  bool aliased = p.v.view.overlaps(lo, hi);
  if constexpr (decltype(p.base)::tensor_scores)
    return aliased || p.base.x.view.overlaps(lo, hi);
  else
    return aliased || p.base.q.view.overlaps(lo, hi) || p.base.k.view.overlaps(lo, hi);
}

/// The user shape of the per-row log-sum-exp for a lead terminal in form f -- (B, Sq), (B, H, Sq),
/// or (B, Sq, H) for packed heads -- and its row-major layout in (B, H, Sq) coordinates.
inline std::pair<std::vector<std::size_t>, layout<3>> lse_form(form f, const problem& pr) {
  formed lf = in_form(f, {pr.batch, pr.q_heads, pr.q_len, 1});  // (B, Sq, 1), (B, H, Sq, 1) or (B, Sq, H)
  if (f != form::packed) lf.user_shape.pop_back();
  return {lf.user_shape, {{pr.batch, pr.q_heads, pr.q_len}, {lf.at.stride[0], lf.at.stride[1], lf.at.stride[2]}}};
}

}  // namespace detail

/// Evaluate an attention (the fused pass), weights or scores expression. The result holds Out
/// (default: the accumulator type -- float, or double if any operand is double), in the form of Q.
template <class Out = void, expression E>
auto eval(const E& e, const schedule& sch = {}) {
  if constexpr (check_grammar<E>() && detail::check_output_type<Out>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    using Acc = detail::acc_t<P>;
    using O = detail::out_t<Out, P>;
    using lead = detail::lead_t<P>;
    const auto& lt = lead_terminal(p.base);
    const problem pr = resolve(p);
    if constexpr (P::has_values) {
      const auto rs = detail::schedule_for(p, pr, sch, pass_kind::attention);
      auto [out, at] = allocate_in<result_t<O, lead::rank>>(lt.how, {pr.batch, pr.q_heads, pr.q_len, pr.v_dim});
      run_fused<Acc>(p, pr, rs, strided_view<O>{out.data(), at});
      return out;
    } else {
      constexpr pass_kind kind = detail::is_weights_v<E> ? pass_kind::weights : pass_kind::scores;
      const auto rs = detail::schedule_for(p, pr, sch, kind);
      const form wf = lt.how == form::packed ? form::bhsd : lt.how;  // weights of heads() queries: (B, H, Sq, Skv)
      auto [out, at] =
          allocate_in<result_t<O, lead::packed ? 4 : lead::rank>>(wf, {pr.batch, pr.q_heads, pr.q_len, pr.kv_len});
      run_materialised<Acc>(p, pr, rs, kind, strided_view<O>{out.data(), at});
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
      run_fused<detail::acc_t<P>>(p, pr, detail::schedule_for(p, pr, sch, pass_kind::attention),
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
      run_fused<detail::acc_t<P>>(p, pr, detail::schedule_for(p, pr, sch, pass_kind::attention),
                                  strided_view<O>{data, at});
    }
  }
}

/// softmax(...) * V with the per-row log-sum-exp of the scores (in the accumulator type), for
/// merging key shards.
template <class Out = void, expression E>
auto eval_with_lse(const E& e, const schedule& sch = {}) {
  if constexpr (check_grammar<E>() && detail::check_output_type<Out>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    static_assert(P::has_values, "xattn: eval_with_lse needs an attention expression: softmax(...) * V");
    if constexpr (P::has_values) {
      using Acc = detail::acc_t<P>;
      using O = detail::out_t<Out, P>;
      using lead = detail::lead_t<P>;
      const auto& lt = lead_terminal(p.base);
      const problem pr = resolve(p);
      constexpr std::size_t lse_rank = lead::rank == 0 ? 0 : lead::packed ? 3 : lead::rank - 1;
      partial_attention<result_t<O, lead::rank>, result_t<Acc, lse_rank>> r;
      layout<4> at;
      std::tie(r.output, at) = allocate_in<decltype(r.output)>(lt.how, {pr.batch, pr.q_heads, pr.q_len, pr.v_dim});
      const auto [lse_shape, lse_at] = detail::lse_form(lt.how, pr);
      r.lse = allocate<decltype(r.lse)>(lse_shape);
      const strided_view<Acc, 3> lse{r.lse.data(), lse_at};
      run_fused<Acc>(p, pr, detail::schedule_for(p, pr, sch, pass_kind::attention),
                     strided_view<O>{r.output.data(), at}, lse);
      return r;
    }
  }
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
