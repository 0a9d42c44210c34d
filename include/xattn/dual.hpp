#pragma once
// Forward-mode automatic differentiation: a dual number v + d·ε (ε² = 0) carries a value and its
// derivative through any code written generically in its scalar type. The backward pass runs
// score modifiers on duals to get d op / d s without a hand-written derivative; user code must
// call math functions unqualified (`using std::tanh; tanh(x)`) so that these overloads are found.
#include <cmath>
#include <type_traits>

namespace xattn {

template <class T>
struct dual {
  T v{};  // value
  T d{};  // derivative along the seeded direction

  constexpr dual() = default;
  constexpr dual(T value, T deriv = T(0)) : v(value), d(deriv) {}  // constants lift implicitly: `T s = 0`
  template <class U>
  requires std::is_arithmetic_v<U> &&(!std::is_same_v<U, T>)constexpr dual(U value) : v(T(value)) {}

  constexpr dual& operator+=(const dual& o) { return *this = *this + o; }
  constexpr dual& operator-=(const dual& o) { return *this = *this - o; }
  constexpr dual& operator*=(const dual& o) { return *this = *this * o; }
  constexpr dual& operator/=(const dual& o) { return *this = *this / o; }

  friend constexpr dual operator+(const dual& a, const dual& b) { return {a.v + b.v, a.d + b.d}; }
  friend constexpr dual operator-(const dual& a, const dual& b) { return {a.v - b.v, a.d - b.d}; }
  friend constexpr dual operator-(const dual& a) { return {-a.v, -a.d}; }
  friend constexpr dual operator*(const dual& a, const dual& b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
  friend constexpr dual operator/(const dual& a, const dual& b) {
    return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)};
  }
  friend constexpr bool operator==(const dual& a, const dual& b) { return a.v == b.v; }
  friend constexpr auto operator<=>(const dual& a, const dual& b) { return a.v <=> b.v; }

  friend dual exp(const dual& a) {
    const T e = std::exp(a.v);
    return {e, a.d * e};
  }
  friend dual log(const dual& a) { return {std::log(a.v), a.d / a.v}; }
  friend dual sqrt(const dual& a) {
    const T r = std::sqrt(a.v);
    return {r, r == T(0) ? T(0) : a.d / (T(2) * r)};
  }
  friend dual tanh(const dual& a) {
    const T t = std::tanh(a.v);
    return {t, a.d * (T(1) - t * t)};
  }
  friend dual abs(const dual& a) { return {std::abs(a.v), a.v < T(0) ? -a.d : a.d}; }
  friend dual fabs(const dual& a) { return abs(a); }
  friend dual pow(const dual& a, T p) { return {std::pow(a.v, p), a.d * p * std::pow(a.v, p - T(1))}; }
  friend dual max(const dual& a, const dual& b) { return a.v >= b.v ? a : b; }
  friend dual min(const dual& a, const dual& b) { return a.v <= b.v ? a : b; }
  friend bool isnan(const dual& a) { return std::isnan(a.v); }
  friend bool isinf(const dual& a) { return std::isinf(a.v); }
};

/// The type a generic policy accumulates in: double for float and double, the dual itself for duals.
template <class T>
using widened_t = std::conditional_t<std::is_floating_point_v<T>, double, T>;

}  // namespace xattn
