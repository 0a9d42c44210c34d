#pragma once
// Integer lanes xsimd 8.1 does not have: int8 codes widened to int16 pairs, multiplied by a pair
// of int16 codes and added in int32 lanes (vpmaddwd, vpdpwssd where AVX512-VNNI has it), then
// converted to float. The int8 (q8_0) key products read keys this way (kernel/qk_q8.hpp). Defined
// only for the widths the build has; a use elsewhere fails to compile.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <immintrin.h>

namespace xattn::simd {

/// The integer operations on one vector of Bytes: int32 lanes, each holding a pair of int16 codes
/// when widened.
template <std::size_t Bytes>
struct int16_pairs;

#if defined(__AVX512BW__)
template <>
struct int16_pairs<64> {
  using type = __m512i;
  static type zero() noexcept { return _mm512_setzero_si512(); }
  /// 16 pairs of codes at p (32 bytes), widened to int16.
  static type widen(const std::int8_t* p) noexcept {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  /// The 32 bytes at p widened to int16: their low nibbles into lo, their high ones into hi.
  static void nibbles(const std::uint8_t* p, type& lo, type& hi) noexcept {
    const type x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    lo = _mm512_and_si512(x, _mm512_set1_epi16(15));
    hi = _mm512_srli_epi16(x, 4);  // nothing above a byte's high nibble after the widening
  }
  static type set(std::int32_t v) noexcept { return _mm512_set1_epi32(v); }
  /// The int16 lanes of a and b as pairs (a[i], b[i]) within each 128-bit lane: lo holds those of
  /// each lane's first four, hi of its last four (pair lane i: lane 8 · (i / 4) + i % 4 of a and b,
  /// + 4 in hi).
  static void interleave(type a, type b, type& lo, type& hi) noexcept {
    lo = _mm512_unpacklo_epi16(a, b);
    hi = _mm512_unpackhi_epi16(a, b);
  }
  /// x's lanes rounded to the nearest int16 (|x| <= 32767), in order at out.
  static void store_rounded(__m512 x, std::int16_t* out) noexcept {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(x)));
  }
  /// acc + the products of each lane's pair k with `pair` (two int16 codes), added.
  static type products(type acc, type k, std::int32_t pair) noexcept {
#if defined(__AVX512VNNI__)
    return _mm512_dpwssd_epi32(acc, k, _mm512_set1_epi32(pair));
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(k, _mm512_set1_epi32(pair)));
#endif
  }
  static type add(type a, type b) noexcept { return _mm512_add_epi32(a, b); }
  static __m512 to_float(type a) noexcept { return _mm512_cvtepi32_ps(a); }
  /// x · y + z rounded once, as key_score's std::fma (xsimd 8.1 has no fused AVX-512 fma: its
  /// x * y + z is fused only where the compiler contracts it).
  static __m512 fmadd(__m512 x, __m512 y, __m512 z) noexcept { return _mm512_fmadd_ps(x, y, z); }
};
#endif

#if defined(__AVX2__)
template <>
struct int16_pairs<32> {
  using type = __m256i;
  static type zero() noexcept { return _mm256_setzero_si256(); }
  static type widen(const std::int8_t* p) noexcept {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void nibbles(const std::uint8_t* p, type& lo, type& hi) noexcept {
    const type x = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    lo = _mm256_and_si256(x, _mm256_set1_epi16(15));
    hi = _mm256_srli_epi16(x, 4);
  }
  static type set(std::int32_t v) noexcept { return _mm256_set1_epi32(v); }
  static void interleave(type a, type b, type& lo, type& hi) noexcept {
    lo = _mm256_unpacklo_epi16(a, b);
    hi = _mm256_unpackhi_epi16(a, b);
  }
  static void store_rounded(__m256 x, std::int16_t* out) noexcept {
    const __m256i i = _mm256_cvtps_epi32(x);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
  }
  static type products(type acc, type k, std::int32_t pair) noexcept {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(k, _mm256_set1_epi32(pair)));
  }
  static type add(type a, type b) noexcept { return _mm256_add_epi32(a, b); }
  static __m256 to_float(type a) noexcept { return _mm256_cvtepi32_ps(a); }
  static __m256 fmadd(__m256 x, __m256 y, __m256 z) noexcept {
#if defined(__FMA__)
    return _mm256_fmadd_ps(x, y, z);
#else
    alignas(32) float a[8], b[8], c[8];
    _mm256_store_ps(a, x), _mm256_store_ps(b, y), _mm256_store_ps(c, z);
    for (std::size_t i = 0; i < 8; ++i) c[i] = std::fma(a[i], b[i], c[i]);
    return _mm256_load_ps(c);
#endif
  }
};
#endif

}  // namespace xattn::simd
