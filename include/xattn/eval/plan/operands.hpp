#pragma once
// A plan's operands as one list: each terminal with its role, the product it belongs to and the
// symbol errors and explain give it. What holds for "any operand" (it reads a cache, it is turned
// by a load transform such as rope) and explain's operand line are loops over this list, so a new base or operand is
// one more entry here rather than a case in each of them.
#include "../../expr/rope.hpp"
#include "../../expr/selected.hpp"
#include "../../expr/tensor_ref.hpp"
#include "../../hana.hpp"
#include "bases.hpp"

#include <type_traits>
#include <utility>

namespace xattn {

enum class operand_role { scores, queries, keys, values };

/// One operand of a plan: its role, its product (0, or 1 for a sum's second), its symbol (X, Q,
/// K, Q1, K1, Q2, K2, V) and its terminal (const when the plan is: a loop over a plan's operands
/// may also change them in place, as the ring's block plan does).
template <class T>
struct plan_operand {
  operand_role role;
  int term;
  const char* symbol;
  T& terminal;
};

template <class T>
plan_operand(operand_role, int, const char*, T&) -> plan_operand<T>;

/// A base's operands, in the order its scores read them.
template <class Base>
auto base_operands(Base& b) {
  using r = operand_role;
  using B = std::remove_const_t<Base>;
  if constexpr (B::tensor_scores)
    return hana::make_tuple(plan_operand{r::scores, 0, "X", b.x});
  else if constexpr (is_sum_base_v<B>)
    return hana::make_tuple(plan_operand{r::queries, 0, "Q1", b.q}, plan_operand{r::keys, 0, "K1", b.k},
                            plan_operand{r::queries, 1, "Q2", b.q2}, plan_operand{r::keys, 1, "K2", b.k2});
  else
    return hana::make_tuple(plan_operand{r::queries, 0, "Q", b.q}, plan_operand{r::keys, 0, "K", b.k});
}

/// A plan's operands: its base's, then the values.
template <class Plan>
auto plan_operands(Plan& p) {
  if constexpr (std::remove_const_t<Plan>::has_values)
    return hana::append(base_operands(p.base), plan_operand{operand_role::values, 0, "V", p.v});
  else
    return base_operands(p.base);
}

namespace detail {

template <class List>
struct operand_types;
template <class... T>
struct operand_types<hana::tuple<plan_operand<T>...>> {
  static constexpr bool any_cache = (is_cache_terminal_v<std::remove_const_t<T>> || ...);
  static constexpr bool any_transformed = (is_transformed_v<std::remove_const_t<T>> || ...);
  static constexpr bool any_selected = (is_selected_terminal_v<std::remove_const_t<T>> || ...);
};

}  // namespace detail

/// Whether a base's scores turn Q or K by a load transform (rope), in any term.
template <class Base>
inline constexpr bool transforms_v =
    detail::operand_types<decltype(base_operands(std::declval<const Base&>()))>::any_transformed;

/// Whether any operand of plan P is a selection (select(K, idx)).
template <class P>
inline constexpr bool selects_v =
    detail::operand_types<decltype(plan_operands(std::declval<const P&>()))>::any_selected;

/// Whether any operand of plan P is a batch of cache sequences.
template <class P>
inline constexpr bool reads_cache_v =
    detail::operand_types<decltype(plan_operands(std::declval<const P&>()))>::any_cache;

}  // namespace xattn
