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

#include <initializer_list>
#include <string>
#include <string_view>
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

namespace detail {

/// Caller memory that an entry writes: what the user named it (`what`: "output", "lse", "dq", ...)
/// and what it must be (`expect`: e.g. "result is (B, Hq, Sq, Dv)") for messages.
struct raw_target {
  const char* what;
  const char* expect;
};

/// Bytes [lo, hi) of another buffer of the call that a target must not overlap, and its name.
struct raw_extent {
  const void* lo = nullptr;
  const void* hi = nullptr;
  const char* what = "";
};

/// The extent of a raw tensor, for raw_extent checks.
template <class T, std::size_t R>
raw_extent extent_of(const T* data, const layout<R>& at, const char* what) {
  const auto [lo, hi] = at.reach();
  if (hi < lo || data == nullptr) return {nullptr, nullptr, what};
  return {data + lo, data + hi + 1, what};
}

/// Raw caller memory an entry writes, checked against the problem: its shape (`want`), no two
/// elements at one address, not null, no overlap with an operand, nor with the call's other
/// buffers (`others`).
template <class Plan, class T, std::size_t R>
layout<R> checked_raw_output(const Plan& p, const T* data, const std::array<std::size_t, R>& shape,
                             const std::array<std::ptrdiff_t, R>& strides, const std::array<std::size_t, R>& want,
                             const char* who, raw_target t, std::initializer_list<raw_extent> others = {}) {
  const std::string name = std::string_view(t.what) == "output" ? "" : std::string(t.what) + " ";
  if (shape != want) fail(who, ": ", name, "shape ", shape_str(shape), " but the ", t.expect, " ", shape_str(want));
  const layout<R> at{shape, strides};
  if (!at.unique())
    fail(who, ": ", name, "strides ", shape_str(strides), " give two elements of shape ", shape_str(shape),
         " the same address");
  const raw_extent mine = extent_of(data, at, t.what);
  if (at.reach().second < at.reach().first) return at;
  if (data == nullptr) fail(who, ": ", t.what, " data is null");
  if (output_overlaps_operands(p, mine.lo, mine.hi))
    fail(who, ": the ", t.what, " overlaps an operand; the fused pass reads them while writing it");
  for (const raw_extent& o : others)
    if (o.lo != nullptr && mine.lo < o.hi && o.lo < mine.hi)
      fail(who, ": the ", t.what, " and the ", o.what, " overlap");
  return at;
}

inline constexpr raw_target output_target{"output", "result is (B, Hq, Sq, Dv)"};
inline constexpr raw_target lse_target{"lse", "log-sum-exp is (B, Hq, Sq)"};

}  // namespace detail

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
      const layout<4> at =
          detail::checked_raw_output(p, data, shape, strides, {pr.batch, pr.q_heads, pr.q_len, pr.v_dim},
                                     "eval_into(e, data, shape, strides)", detail::output_target);
      run_fused<accumulator_of_t<P>>(p, pr, schedule_for(p, pr, sch, pass_kind::attention).forward,
                                     strided_view<O>{data, at});
    }
  }
}

/// eval_into on raw memory, with each row's log-sum-exp (what grad needs) written too: lse seen as
/// (B, Hq, Sq) with element strides, in the accumulator type (Acc: float, or double if an operand
/// is double). Both are checked before anything is written.
template <expression E, element O, class Acc>
void eval_with_lse_into(const E& e, O* data, std::array<std::size_t, 4> shape, std::array<std::ptrdiff_t, 4> strides,
                        Acc* lse, std::array<std::size_t, 3> lse_shape, std::array<std::ptrdiff_t, 3> lse_strides,
                        const schedule& sch = {}) {
  if constexpr (check_grammar<E>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    static_assert(P::has_values, "xattn: eval_with_lse_into needs an attention expression: softmax(...) * V");
    static_assert(std::is_same_v<Acc, accumulator_of_t<P>>,
                  "xattn: eval_with_lse_into: lse must hold the accumulator type (float; double if an operand is "
                  "double)");
    if constexpr (P::has_values && std::is_same_v<Acc, accumulator_of_t<P>>) {
      const char* who = "eval_with_lse_into(e, data, shape, strides, lse, lse_shape, lse_strides)";
      const problem pr = resolve(p);
      const layout<4> at = detail::checked_raw_output(
          p, data, shape, strides, {pr.batch, pr.q_heads, pr.q_len, pr.v_dim}, who, detail::output_target);
      const layout<3> lat =
          detail::checked_raw_output(p, lse, lse_shape, lse_strides, {pr.batch, pr.q_heads, pr.q_len}, who,
                                     detail::lse_target, {detail::extent_of(data, at, "output")});
      run_fused<Acc>(p, pr, schedule_for(p, pr, sch, pass_kind::attention).forward, strided_view<O>{data, at},
                     strided_view<Acc, 3>{lse, lat});
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
