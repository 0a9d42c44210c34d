#pragma once
// eval(e [, schedule]): softmax(...) * V runs the fused pass; softmax(...) alone returns the weights
// and a bare score expression the scores, both materialised by the reference evaluator.
#include "fused.hpp"
#include "partial.hpp"
#include "reference.hpp"
#include "result.hpp"

#include <type_traits>

namespace xattn {

namespace evaluating {

template <class Base>
const auto& lead_terminal(const Base& b) {
  if constexpr (requires { b.x; })
    return b.x;
  else
    return b.q;
}

template <class Plan>
using lead_t = std::decay_t<decltype(lead_terminal(std::declval<Plan>().base))>;

template <class Plan>
constexpr void check_types() {
  using T = typename lead_t<Plan>::value_type;
  if constexpr (requires { std::declval<Plan>().base.k; })
    static_assert(std::is_same_v<T, typename decltype(std::declval<Plan>().base.k)::value_type>,
                  "xattn: Q and K must have the same element type (float or double)");
  if constexpr (Plan::has_values)
    static_assert(std::is_same_v<T, typename decltype(std::declval<Plan>().v)::value_type>,
                  "xattn: V must have the same element type as Q and K (float or double)");
}

/// Materialise a (B, H, Sq, last) double tensor in the user's layout for weights/scores.
template <class T, std::size_t Rank, class Src>
auto to_user(const Src& src, layout how, const problem& pr) {
  const layout wl = how == layout::packed ? layout::bhsd : how;
  auto r = allocate<result_t<T, Rank>>(user_shape(wl, pr, src.shape()[3]));
  auto v = view4<T>(r, wl, pr, src.shape()[3]);
  for (std::size_t b = 0; b < pr.batch; ++b)
    for (std::size_t h = 0; h < pr.q_heads; ++h)
      for (std::size_t i = 0; i < pr.q_len; ++i)
        for (std::size_t j = 0; j < src.shape()[3]; ++j) v.mutable_row(b, h, i)[j] = T(src(b, h, i, j));
  return r;
}

}  // namespace evaluating

template <expression E>
auto eval(const E& e, const schedule& sch = {}) {
  const auto p = make_plan(e);
  using P = std::decay_t<decltype(p)>;
  evaluating::check_types<P>();
  using lead = evaluating::lead_t<P>;
  using T = typename lead::value_type;
  const auto& lt = evaluating::lead_terminal(p.base);
  if constexpr (P::has_values) {
    const problem pr = resolve(p);
    auto out = allocate<result_t<T, lead::rank>>(user_shape(lt.how, pr, pr.v_dim));
    run_fused<T>(p, pr, sch, view4<T>(out, lt.how, pr, pr.v_dim));
    return out;
  } else {
    constexpr std::size_t rank = lead::packed ? 4 : lead::rank;
    const auto r = reference_eval(p);
    const problem pr = resolve(p);
    if constexpr (planning::is_weights<E>::value)
      return evaluating::to_user<T, rank>(r.weights, lt.how, pr);
    else
      return evaluating::to_user<T, rank>(r.scores, lt.how, pr);
  }
}

/// softmax(...) * V written into caller storage (an xtensor container or adaptor of the result's
/// shape), for callers that keep their buffers: no allocation besides the kernel's tiles.
template <expression E, class Out>
void eval_into(const E& e, Out&& out, const schedule& sch = {}) {
  const auto p = make_plan(e);
  using P = std::decay_t<decltype(p)>;
  static_assert(P::has_values, "xattn: eval_into needs an attention expression: softmax(...) * V");
  evaluating::check_types<P>();
  using T = typename evaluating::lead_t<P>::value_type;
  static_assert(std::is_same_v<typename std::decay_t<Out>::value_type, T>,
                "xattn: eval_into's output must have the element type of Q, K and V");
  const auto& lt = evaluating::lead_terminal(p.base);
  const problem pr = resolve(p);
  const auto want = user_shape(lt.how, pr, pr.v_dim);
  if (!std::equal(want.begin(), want.end(), out.shape().begin(), out.shape().end()))
    detail::fail("eval_into(e, out): out has shape ", detail::shape_str(out.shape()), " but the result is ",
                 detail::shape_str(want));
  if (out.layout() != xt::layout_type::row_major)
    detail::fail("eval_into(e, out): out must be a contiguous row-major tensor");
  const T* lo = out.data();
  const T* hi = lo + out.size();
  bool aliased = p.v.view.overlaps(lo, hi);
  if constexpr (requires { p.base.k; }) aliased = aliased || p.base.q.view.overlaps(lo, hi) || p.base.k.view.overlaps(lo, hi);
  else aliased = aliased || p.base.x.view.overlaps(lo, hi);
  if (aliased) detail::fail("eval_into(e, out): out ", detail::shape_str(out.shape()), " overlaps an operand; the fused pass reads them while writing out");
  run_fused<T>(p, pr, sch, view4<T>(out, lt.how, pr, pr.v_dim));
}

/// softmax(...) * V with the per-row log-sum-exp of the scores, for merging key shards.
template <expression E>
auto eval_with_lse(const E& e, const schedule& sch = {}) {
  const auto p = make_plan(e);
  using P = std::decay_t<decltype(p)>;
  static_assert(P::has_values, "xattn: eval_with_lse needs an attention expression: softmax(...) * V");
  evaluating::check_types<P>();
  using lead = evaluating::lead_t<P>;
  using T = typename lead::value_type;
  const auto& lt = evaluating::lead_terminal(p.base);
  const problem pr = resolve(p);
  constexpr std::size_t lse_rank = lead::rank == 0 ? 0 : lead::packed ? 3 : lead::rank - 1;
  partial_attention<result_t<T, lead::rank>, result_t<T, lse_rank>> r;
  r.output = allocate<result_t<T, lead::rank>>(user_shape(lt.how, pr, pr.v_dim));
  const auto sq = std::ptrdiff_t(pr.q_len), h = std::ptrdiff_t(pr.q_heads);
  lse_target<T> lse;
  switch (lt.how) {
    case layout::bsd: r.lse = allocate<decltype(r.lse)>({pr.batch, pr.q_len}); lse = {nullptr, sq, 0, 1}; break;
    case layout::packed: r.lse = allocate<decltype(r.lse)>({pr.batch, pr.q_len, pr.q_heads}); lse = {nullptr, sq * h, 1, h}; break;
    default: r.lse = allocate<decltype(r.lse)>({pr.batch, pr.q_heads, pr.q_len}); lse = {nullptr, h * sq, sq, 1}; break;
  }
  lse.data = r.lse.data();
  run_fused<T>(p, pr, sch, view4<T>(r.output, lt.how, pr, pr.v_dim), lse);
  return r;
}

/// The double-precision reference of any expression (weights, scores, output, lse; 4-D layout).
template <expression E>
reference_result reference(const E& e) {
  return reference_eval(make_plan(e));
}

}  // namespace xattn
