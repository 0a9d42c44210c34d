#pragma once
// A dual number (dual.hpp) that also carries its derivatives with respect to the learnables
// (learnable.hpp) it met: one forward evaluation of a score modifier on it gives d op / d s and
// d op / d (each learnable it read), where the tape (var.hpp) needed a second evaluation and a
// sweep per score. Few learnables meet in one evaluation (a table entry, a slope): up to
// `capacity` are kept by address; past that the value says so (overflowed()) and the caller
// differentiates that score on the tape instead.
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace xattn {

template <class T>
struct param_dual {
  static constexpr std::size_t capacity = 4;
  T v{};               // value
  T d{};               // derivative along the seeded input
  std::uint8_t n = 0;  // learnables held; capacity + 1: more met than fit
  std::array<const void*, capacity> at{};
  std::array<T, capacity> p{};  // d value / d learnable at at[e]

  constexpr param_dual() = default;
  constexpr param_dual(T value, T deriv = T(0)) : v(value), d(deriv) {}  // constants lift implicitly
  template <class U>
  requires std::is_arithmetic_v<U> &&(!std::is_same_v<U, T>)constexpr param_dual(U value) : v(T(value)) {}

  /// The learnable at `address` holding `value`: derivative 1 with respect to itself.
  static param_dual learnable(const void* address, T value) {
    param_dual r(value);
    r.n = 1;
    r.at[0] = address;
    r.p[0] = T(1);
    return r;
  }
  bool overflowed() const noexcept { return n > capacity; }

  param_dual& operator+=(const param_dual& o) { return *this = *this + o; }
  param_dual& operator-=(const param_dual& o) { return *this = *this - o; }
  param_dual& operator*=(const param_dual& o) { return *this = *this * o; }
  param_dual& operator/=(const param_dual& o) { return *this = *this / o; }

  friend param_dual operator+(const param_dual& a, const param_dual& b) { return chain(a.v + b.v, a, T(1), b, T(1)); }
  friend param_dual operator-(const param_dual& a, const param_dual& b) { return chain(a.v - b.v, a, T(1), b, T(-1)); }
  friend param_dual operator-(const param_dual& a) { return chain(-a.v, a, T(-1)); }
  friend param_dual operator*(const param_dual& a, const param_dual& b) { return chain(a.v * b.v, a, b.v, b, a.v); }
  friend param_dual operator/(const param_dual& a, const param_dual& b) {
    const T q = a.v / b.v;
    return chain(q, a, T(1) / b.v, b, -q / b.v);
  }
  friend constexpr bool operator==(const param_dual& a, const param_dual& b) { return a.v == b.v; }
  friend constexpr auto operator<=>(const param_dual& a, const param_dual& b) { return a.v <=> b.v; }

  friend param_dual exp(const param_dual& a) {
    const T e = std::exp(a.v);
    return chain(e, a, e);
  }
  friend param_dual log(const param_dual& a) { return chain(std::log(a.v), a, T(1) / a.v); }
  friend param_dual sqrt(const param_dual& a) {
    const T r = std::sqrt(a.v);
    return chain(r, a, r == T(0) ? T(0) : T(1) / (T(2) * r));
  }
  friend param_dual tanh(const param_dual& a) {
    const T t = std::tanh(a.v);
    return chain(t, a, T(1) - t * t);
  }
  friend param_dual abs(const param_dual& a) { return chain(std::abs(a.v), a, a.v < T(0) ? T(-1) : T(1)); }
  friend param_dual fabs(const param_dual& a) { return abs(a); }
  friend param_dual pow(const param_dual& a, T e) { return chain(std::pow(a.v, e), a, e * std::pow(a.v, e - T(1))); }
  friend param_dual max(const param_dual& a, const param_dual& b) { return a.v >= b.v ? a : b; }
  friend param_dual min(const param_dual& a, const param_dual& b) { return a.v <= b.v ? a : b; }
  friend bool isnan(const param_dual& a) { return std::isnan(a.v); }
  friend bool isinf(const param_dual& a) { return std::isinf(a.v); }

 private:
  /// value with derivatives fa · a's + fb · b's (the learnables of both, merged by address).
  static param_dual chain(T value, const param_dual& a, T fa, const param_dual& b = {}, T fb = T(0)) {
    param_dual r(value, fa * a.d + fb * b.d);
    if (a.overflowed() || b.overflowed()) {
      r.n = capacity + 1;
      return r;
    }
    r.n = a.n;
    for (std::size_t e = 0; e < a.n; ++e) r.at[e] = a.at[e], r.p[e] = fa * a.p[e];
    for (std::size_t e = 0; e < b.n; ++e) {
      std::size_t k = 0;
      while (k < r.n && r.at[k] != b.at[e]) ++k;
      if (k == capacity) {
        r.n = capacity + 1;
        return r;
      }
      if (k == r.n) r.at[r.n++] = b.at[e], r.p[k] = T(0);
      r.p[k] += fb * b.p[e];
    }
    return r;
  }
};

}  // namespace xattn
