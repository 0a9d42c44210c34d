#pragma once
// Every node of an attention expression derives from expr_base<Self>; the operators only accept
// such types, so they never capture arithmetic on unrelated classes (xtensor expressions included).
#include <concepts>
#include <type_traits>

namespace xattn {

template <class Derived>
struct expr_base {};

template <class E>
concept expression = std::derived_from<std::remove_cvref_t<E>, expr_base<std::remove_cvref_t<E>>>;

template <class T>
concept arithmetic = std::is_arithmetic_v<std::remove_cvref_t<T>>;

}  // namespace xattn
