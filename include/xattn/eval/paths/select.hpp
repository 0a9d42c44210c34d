#pragma once
// Which score path a plan's base takes, decided at compile time from the policy's capabilities
// (as Eigen picks an evaluator per expression type). Each path is one type in one file that owns
// how a score is computed in both directions, with the same members:
//
//   name, what                             what explain prints about the path
//   facts(base, problem) -> path_facts      what the schedule needs to know
//   score_op(forward_schedule), key_pack_op, key_work, key_ops, query_ops, backward_ops
//                                           the named steps it runs (explain; the tracing tests)
//   forward:  keys                          built once per evaluation (projected, packed)
//             tiles                         one per thread: load_queries, scores
//   backward: grads                         per evaluation: features and gradient buffers;
//                                           build (parallel), query_grads, reduce_row, finish
//             grad_tiles                    one per thread: begin_task, load_keys, load_queries,
//                                           scores, [product through an epilogue: plain products],
//                                           gradients, store_keys, end_task
//
// The workers never know which path they run, and a new path is one new file plus its line here.
#include "../../hana.hpp"
#include "../../policy/concepts.hpp"
#include "../../policy/dot.hpp"
#include "../../types.hpp"
#include "../plan/plan.hpp"
#include "../plan/schedule.hpp"
#include "../plan/types.hpp"
#include "../values/reader.hpp"
#include "dot_features.hpp"
#include "dot_identity.hpp"
#include "dot_pairs.hpp"
#include "dot_rows.hpp"
#include "pair_features.hpp"
#include "pair_raw.hpp"
#include "recorded.hpp"
#include "tensor_scores.hpp"

#include <type_traits>

namespace xattn {

namespace detail {

template <class Acc, class Base>
auto select_path() {
  if constexpr (Base::tensor_scores) {
    return std::type_identity<tensor_scores_path<Acc, Base>>{};
  } else {
    using P = typename Base::policy_type;
    if constexpr (transforms_v<Base> || is_sum_base_v<Base>)  // rope, sums: rows assembled as loaded and packed
      return std::type_identity<dot_rows_path<Acc, Base, assembles_bf16_v<Acc, Base>>>{};
    else if constexpr (std::is_same_v<P, dot> && takes_bf16_pairs_v<Acc, Base>)
      return std::type_identity<dot_pairs_path<Acc, Base>>{};
    else if constexpr (std::is_same_v<P, dot>)  // identity projections: the keys are their own features
      return std::type_identity<dot_identity_path<Acc, Base>>{};
    else if constexpr (separable<P>())
      return std::type_identity<dot_features_path<Acc, Base>>{};
    else if constexpr (combines_in<P, float> || combines_in<P, double>)
      return std::type_identity<pair_features_path<Acc, Base>>{};
    else if constexpr (scores_in<P, recorded>)  // generic: recorded, and separated when it factors
      return std::type_identity<recorded_path<Acc, Base>>{};
    else
      return std::type_identity<pair_raw_path<Acc, Base>>{};
  }
}

}  // namespace detail

/// The score path of a plan base, for a kernel accumulating in Acc.
template <class Acc, class Base>
using path_t = typename decltype(detail::select_path<Acc, Base>())::type;

/// Its name: "dot_identity", "dot_bf16", "dot_rotary", "dot_sum" (either with "_bf16"), "dot_features",
/// "pair_features", "recorded", "pair_raw" or "tensor".
template <class Base, class Acc = float>
inline constexpr std::string_view path_name_v = path_t<Acc, Base>::name;

/// The path of plan type Plan.
template <class Plan>
using plan_path_t = path_t<accumulator_of_t<Plan>, std::decay_t<decltype(std::declval<Plan>().base)>>;

/// What the values V of an attention plan tell the schedule.
template <class Acc, class Plan>
value_facts values_facts(const Plan& p, const problem& pr) {
  if constexpr (Plan::has_values)
    return value_facts_of<Acc, typename decltype(p.v)::value_type>(p.v.view, pr);
  else
    return value_facts{};
}

/// Everything about plan p the schedule depends on besides its sizes.
template <class Plan>
plan_facts plan_facts_of(const Plan& p, const problem& pr) {
  using Acc = accumulator_of_t<Plan>;
  return {plan_path_t<Plan>::facts(p.base, pr), values_facts<Acc>(p, pr), !decltype(hana::is_empty(p.ops))::value,
          p.drop.p > 0};
}

/// The resolved schedule of plan p over problem pr for a pass of kind `kind`.
template <class Plan>
resolved_schedule schedule_for(const Plan& p, const problem& pr, const schedule& sch, pass_kind kind,
                               const machine& m = machine::here()) {
  return resolve_schedule(sch, pr, plan_facts_of(p, pr), kind, m);
}

}  // namespace xattn
