#pragma once
// The few xsimd 8.1 facilities the kernel needs, behind stable names: 8.1 spells the horizontal sum
// `hadd` and has no horizontal max, and later xsimd versions renamed both.
//
// GCC 12 reports the `__m512 __Y = __Y;` of its own _mm512_undefined_* (used by many AVX-512
// intrinsics) as uninitialized wherever such an intrinsic is inlined into our code, even though
// the header is a system header (GCC PR 105593, fixed in 13). Every xattn header that runs SIMD
// code brackets it with the pragmas below, so that users' -Wall -Wextra builds stay quiet.
#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Included inside the pragmas too: where xsimd's functions are not inlined (-O0, -Og) the warning
// is reported in their own bodies.
#include <immintrin.h>
#include <xsimd/xsimd.hpp>

namespace xattn::simd {

template <class T>
using batch = xsimd::batch<T>;  // default architecture: follows -march

template <class T>
inline constexpr std::size_t width = batch<T>::size;

template <class T>
inline T hsum(const batch<T>& x) noexcept {
  return xsimd::hadd(x);
}

namespace detail {

template <class B>  // a template, so the AVX-512 intrinsics are only instantiated for AVX-512 batches
inline auto hmax512(const B& x) noexcept {
  if constexpr (std::is_same_v<typename B::value_type, float>)
    return _mm512_reduce_max_ps(x);
  else
    return _mm512_reduce_max_pd(x);
}

}  // namespace detail

template <class T>
inline T hmax(const batch<T>& x) noexcept {
  if constexpr (std::is_base_of_v<xsimd::avx512f, typename batch<T>::arch_type>) {
    return detail::hmax512(x);
  } else {
    alignas(64) std::array<T, width<T>> lanes;
    x.store_aligned(lanes.data());
    return *std::max_element(lanes.begin(), lanes.end());
  }
}

template <class T>
inline batch<T> load(const T* p) noexcept {
  return batch<T>::load_unaligned(p);
}

/// One batch of T from storage of another element type E, converted lane by lane. The generic
/// form goes through memory; a storage type with a fast conversion (16-bit floats) overloads it.
template <class T, class E>
inline batch<T> load_as(const E* p) noexcept {
  if constexpr (std::is_same_v<T, E>) {
    return load(p);
  } else {
    alignas(64) std::array<T, width<T>> lanes;
    for (std::size_t i = 0; i < width<T>; ++i) lanes[i] = T(p[i]);
    return batch<T>::load_aligned(lanes.data());
  }
}

template <class T>
inline void store(T* p, const batch<T>& x) noexcept {
  x.store_unaligned(p);
}

/// Number of elements rounded up to whole batches.
template <class T>
constexpr std::size_t padded(std::size_t n) noexcept {
  return (n + width<T> - 1) / width<T> * width<T>;
}

}  // namespace xattn::simd

#pragma GCC diagnostic pop
