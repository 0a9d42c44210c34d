#pragma once
// The few xsimd 8.1 facilities the kernel needs, behind stable names: 8.1 spells the horizontal sum
// `hadd` and has no horizontal max, and later xsimd versions renamed both.
//
// GCC 12 reports the `__m512 __Y = __Y;` of its own _mm512_undefined_* (used by many AVX-512
// intrinsics) as uninitialized wherever such an intrinsic is inlined into our code, even though
// the header is a system header (GCC PR 105593, fixed in 13). Every xattn header that runs SIMD
// code brackets it with the pragmas below, so that users' -Wall -Wextra builds stay quiet.
#include "../bfloat16.hpp"
#include "../float16.hpp"
#include "../round_up.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Included inside the pragmas too: where xsimd's functions are not inlined (-O0, -Og) the warning
// is reported in their own bodies.
#include <immintrin.h>
#include <xsimd/xsimd.hpp>

namespace xattn::simd {

template <class T>
using batch = xsimd::batch<T>;  // default architecture: follows -march

template <class T>
inline constexpr std::size_t width = batch<T>::size;

/// Whether batch<float> is an AVX2 or AVX-512 batch: the ISAs the in-register code (16-bit
/// widening, kernel::transpose_square) is written for.
inline constexpr bool avx2_or_avx512 = std::is_base_of_v<xsimd::avx512f, batch<float>::arch_type> ||
                                       std::is_base_of_v<xsimd::avx2, batch<float>::arch_type>;

namespace detail {

/// The sum (Max false) or the maximum of an AVX-512 batch's lanes, by GCC's halving trees. A
/// template, so the AVX-512 intrinsics are only instantiated for AVX-512 batches.
template <bool Max, class B>
inline auto reduce512(const B& x) noexcept {
  if constexpr (std::is_same_v<typename B::value_type, float>) {
    if constexpr (Max)
      return _mm512_reduce_max_ps(x);
    else
      return _mm512_reduce_add_ps(x);
  } else {
    if constexpr (Max)
      return _mm512_reduce_max_pd(x);
    else
      return _mm512_reduce_add_pd(x);
  }
}

}  // namespace detail

/// The sum of x's lanes. On AVX-512 a halving tree (GCC's _mm512_reduce_add_ps): xsimd 8.1's
/// hadd goes through 256-bit hadds, too slow for decoding's score product, which sums every
/// (row, key) pair.
template <class T>
inline T hsum(const batch<T>& x) noexcept {
  if constexpr (std::is_base_of_v<xsimd::avx512f, typename batch<T>::arch_type>)
    return detail::reduce512<false>(x);
  else
    return xsimd::hadd(x);
}

template <class T>
inline T hmax(const batch<T>& x) noexcept {
  if constexpr (std::is_base_of_v<xsimd::avx512f, typename batch<T>::arch_type>) {
    return detail::reduce512<true>(x);
  } else {
    alignas(64) std::array<T, width<T>> lanes;
    x.store_aligned(lanes.data());
    return *std::max_element(lanes.begin(), lanes.end());
  }
}

/// x, kept in a register: GCC otherwise folds a loaded operand used by several FMAs into each of
/// them as a memory operand, reloading it once per FMA.
template <class B>
inline B in_register(B x) noexcept {
  typename B::register_type r = x;
  asm("" : "+v"(r));
  return r;
}

template <class T>
inline batch<T> load(const T* p) noexcept {
  return batch<T>::load_unaligned(p);
}

namespace detail {

// 16 (AVX-512) or 8 (AVX2) 16-bit floats widened to float in registers: bfloat16 is the top half
// of a float (a shift), float16 has F16C's vcvtph2ps. Templates, so that only the ISA compiled
// for is instantiated.
template <class E, class B>
inline B widen16(const E* p) noexcept {
  if constexpr (std::is_same_v<E, bfloat16>) {
    if constexpr (B::size == 16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
    else
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
  } else if constexpr (B::size == 16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
  }
}

#if defined(__F16C__)
inline constexpr bool f16c = true;
#else
inline constexpr bool f16c = false;
#endif

template <class E>
inline constexpr bool is_widenable16 = std::is_same_v<E, bfloat16> || (std::is_same_v<E, float16> && f16c);

/// Whether load_as<T>(const E*) widens in registers.
template <class T, class E>
inline constexpr bool widens16_v = std::is_same_v<T, float>&& avx2_or_avx512&& is_widenable16<E>;

}  // namespace detail

/// Whether load_as<T>(const E*) widens in registers (T float, E a 16-bit float the ISA widens).
template <class T, class E>
inline constexpr bool widens16_v = detail::widens16_v<T, E>;

/// One batch of T from storage of another element type E, converted lane by lane: 16-bit floats
/// in registers; anything else through memory.
template <class T, class E>
inline batch<T> load_as(const E* p) noexcept {
  if constexpr (std::is_same_v<T, E>) {
    return load(p);
  } else if constexpr (widens16_v<T, E>) {
    return detail::widen16<E, batch<T>>(p);
  } else {
    alignas(64) std::array<T, width<T>> lanes;
    for (std::size_t i = 0; i < width<T>; ++i) lanes[i] = T(p[i]);
    return batch<T>::load_aligned(lanes.data());
  }
}

/// One batch of T from a row handle (a quantized row's codes and scales, kernel/q8_row.hpp,
/// kernel/scaled_row.hpp): the handle dequantizes its own format. Declared here, before the
/// kernels, so that their qualified calls find every format's handles.
template <class T, class R>
requires requires(const R& r) { r.template load<T>(); }
inline batch<T> load_as(const R& r) noexcept { return r.template load<T>(); }

template <class T>
inline void store(T* p, const batch<T>& x) noexcept {
  x.store_unaligned(p);
}

/// Number of elements rounded up to whole batches.
template <class T>
constexpr std::size_t padded(std::size_t n) noexcept {
  return round_up(n, width<T>);
}

}  // namespace xattn::simd

#pragma GCC diagnostic pop
