#pragma once
// wide<T, K>: K SIMD batches used as one value of K · width lanes, with element-wise arithmetic,
// comparisons, selects and math. The lanes' reverse mode (var_lanes.hpp) computes on it, one tape
// node per operation for all the lanes, so its width is chosen there, not by the ISA alone.
#include "compat.hpp"

#include <array>
#include <cstddef>
#include <type_traits>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::simd {

template <class T, std::size_t K>
struct wide_mask {
  std::array<xsimd::batch_bool<T>, K> m;
};

template <class T, std::size_t K>
struct wide {
  using batch_type = batch<T>;
  static constexpr std::size_t size = K * batch_type::size;
  std::array<batch_type, K> b;

  wide() : wide(T(0)) {}
  explicit wide(T x) {
    for (auto& v : b) v = batch_type(x);
  }
  static wide load(const T* p) {
    wide r;
    for (std::size_t i = 0; i < K; ++i) r.b[i] = batch_type::load_unaligned(p + i * batch_type::size);
    return r;
  }
  void store(T* p) const {
    for (std::size_t i = 0; i < K; ++i) b[i].store_unaligned(p + i * batch_type::size);
  }

  /// f applied batch by batch to the batches of xs (wides or masks of the same K).
  template <class F, class... X>
  static auto map(F&& f, const X&... xs) {
    using R = decltype(f(part(xs, 0)...));
    if constexpr (std::is_same_v<R, batch_type>) {
      wide r;
      for (std::size_t i = 0; i < K; ++i) r.b[i] = f(part(xs, i)...);
      return r;
    } else {
      wide_mask<T, K> r;
      for (std::size_t i = 0; i < K; ++i) r.m[i] = f(part(xs, i)...);
      return r;
    }
  }

  wide& operator+=(const wide& o) { return *this = *this + o; }
  friend wide operator+(const wide& x, const wide& y) {
    return map([](auto a, auto c) { return a + c; }, x, y);
  }
  friend wide operator-(const wide& x, const wide& y) {
    return map([](auto a, auto c) { return a - c; }, x, y);
  }
  friend wide operator*(const wide& x, const wide& y) {
    return map([](auto a, auto c) { return a * c; }, x, y);
  }
  friend wide operator/(const wide& x, const wide& y) {
    return map([](auto a, auto c) { return a / c; }, x, y);
  }
  friend wide operator-(const wide& x) {
    return map([](auto a) { return -a; }, x);
  }
  friend wide_mask<T, K> operator==(const wide& x, const wide& y) {
    return map([](auto a, auto c) { return a == c; }, x, y);
  }
  friend wide_mask<T, K> operator!=(const wide& x, const wide& y) {
    return map([](auto a, auto c) { return a != c; }, x, y);
  }
  friend wide_mask<T, K> operator<(const wide& x, const wide& y) {
    return map([](auto a, auto c) { return a < c; }, x, y);
  }
  friend wide_mask<T, K> operator<=(const wide& x, const wide& y) {
    return map([](auto a, auto c) { return a <= c; }, x, y);
  }
  friend wide_mask<T, K> operator>(const wide& x, const wide& y) {
    return map([](auto a, auto c) { return a > c; }, x, y);
  }
  friend wide_mask<T, K> operator>=(const wide& x, const wide& y) {
    return map([](auto a, auto c) { return a >= c; }, x, y);
  }
  friend wide select(const wide_mask<T, K>& m, const wide& x, const wide& y) {
    return map([](auto c, auto a, auto d) { return xsimd::select(c, a, d); }, m, x, y);
  }
  friend wide exp(const wide& x) {
    return map([](auto a) { return xsimd::exp(a); }, x);
  }
  friend wide log(const wide& x) {
    return map([](auto a) { return xsimd::log(a); }, x);
  }
  friend wide sqrt(const wide& x) {
    return map([](auto a) { return xsimd::sqrt(a); }, x);
  }
  friend wide tanh(const wide& x) {
    return map([](auto a) { return xsimd::tanh(a); }, x);
  }
  friend wide abs(const wide& x) {
    return map([](auto a) { return xsimd::abs(a); }, x);
  }
  friend wide pow(const wide& x, const wide& y) {
    return map([](auto a, auto c) { return xsimd::pow(a, c); }, x, y);
  }
  friend wide_mask<T, K> isnan(const wide& x) {
    return map([](auto a) { return xsimd::isnan(a); }, x);
  }
  friend wide_mask<T, K> isinf(const wide& x) {
    return map([](auto a) { return xsimd::isinf(a); }, x);
  }
  /// The sum of the lanes: each batch's (hsum), then the K sums in order.
  friend T hsum(const wide& x) {
    T s = simd::hsum(x.b[0]);
    for (std::size_t i = 1; i < K; ++i) s += simd::hsum(x.b[i]);
    return s;
  }

 private:
  static const batch_type& part(const wide& x, std::size_t i) { return x.b[i]; }
  static const xsimd::batch_bool<T>& part(const wide_mask<T, K>& x, std::size_t i) { return x.m[i]; }
};

template <class T, std::size_t K>
bool all(const wide_mask<T, K>& x) {
  for (const auto& m : x.m)
    if (!xsimd::all(m)) return false;
  return true;
}
template <class T, std::size_t K>
bool none(const wide_mask<T, K>& x) {
  for (const auto& m : x.m)
    if (xsimd::any(m)) return false;
  return true;
}

/// The wide of 64 bytes: 16 floats or 8 doubles (two AVX2 batches, one AVX-512 batch).
template <class T>
using wide64 = wide<T, (64 / sizeof(batch<T>) > 0 ? 64 / sizeof(batch<T>) : 1)>;

}  // namespace xattn::simd

#pragma GCC diagnostic pop
