#pragma once
// The types a plan fixes: the accumulator the kernel computes in, and the lead terminal (Q, or the
// score tensor X) whose form and rank results take.
#include "../../types.hpp"
#include "plan.hpp"

#include <type_traits>

namespace xattn {

namespace detail {

template <class T>
using value_of = typename std::decay_t<T>::value_type;

/// The value types of a dot base's operands (both terms of a sum).
template <class Base>
struct operand_values {
  template <class... Extra>
  using acc = accumulator_t<value_of<decltype(Base::q)>, value_of<decltype(Base::k)>, Extra...>;
};
template <class Q, class K, class Q2, class K2>
struct operand_values<sum_base<Q, K, Q2, K2>> {
  template <class... Extra>
  using acc = accumulator_t<value_of<Q>, value_of<K>, value_of<Q2>, value_of<K2>, Extra...>;
};

template <class Plan>
auto pick_accumulator() {
  using base = decltype(std::declval<Plan>().base);
  if constexpr (base::tensor_scores) {
    if constexpr (Plan::has_values)
      return std::type_identity<
          accumulator_t<value_of<decltype(std::declval<base>().x)>, value_of<decltype(std::declval<Plan>().v)>>>{};
    else
      return std::type_identity<accumulator_t<value_of<decltype(std::declval<base>().x)>>>{};
  } else if constexpr (Plan::has_values) {
    return std::type_identity<
        typename operand_values<base>::template acc<value_of<decltype(std::declval<Plan>().v)>>>{};
  } else {
    return std::type_identity<typename operand_values<base>::template acc<>>{};
  }
}

}  // namespace detail

/// The accumulator type of a plan: double if any operand holds double, float otherwise.
template <class Plan>
using accumulator_of_t = typename decltype(detail::pick_accumulator<Plan>())::type;

/// The terminal that fixes the result's layout and sizes.
template <class Plan>
using lead_terminal_t = std::decay_t<decltype(lead_terminal(std::declval<Plan>().base))>;

/// The element type of a result: Out if given (not void), else the accumulator's.
template <class Out, class Plan>
using output_element_t = std::conditional_t<std::is_void_v<Out>, accumulator_of_t<Plan>, Out>;

}  // namespace xattn
