#pragma once
// fp8 pages: OCP FP8 E4M3 codes (E4M3FN: 4 exponent bits of bias 7, 3 mantissa bits, no
// infinities, ±448 the largest, 0x7f and 0xff NaN), as vLLM's CPU backend stores its KV cache, with
// one float scale per 32 features of a row (scale = max|x| / 448; each feature x / scale rounded
// to nearest even, saturating). Its steps are relative (3 mantissa bits: half a step is 2^-4 of a
// value) where int8's q8_0 steps are absolute (amax / 254): coarser for features of one magnitude,
// finer for the small features of a group with an outlier.
#include "../../kernel/scaled_row.hpp"
#include "../../simd/compat.hpp"
#include "../format.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace xattn {

/// One E4M3 code; converts to and from float exactly as the OCP specification rounds (nearest,
/// ties to even, saturating to ±448).
struct float8_e4m3 {
  std::uint8_t bits = 0;

  float8_e4m3() = default;
  explicit float8_e4m3(float x) noexcept : bits(encode(x)) {}
  explicit operator float() const noexcept { return decode(bits); }

  static constexpr float max = 448.0f;

  static std::uint8_t encode(float x) noexcept {
    const auto sign = std::uint8_t(std::signbit(x) ? 0x80 : 0);
    const float y = std::abs(x);
    if (!(y < max)) return sign | 0x7e;                                       // saturated (and NaN)
    if (y < 0x1p-6f) return sign | std::uint8_t(std::nearbyint(y * 512.0f));  // subnormal: steps of 2^-9
    int e = 0;
    std::frexp(y, &e);                                        // y in [2^(e-1), 2^e)
    auto m = unsigned(std::nearbyint(std::ldexp(y, 4 - e)));  // in [8, 16]
    unsigned be = unsigned(e - 1 + 7);
    if (m == 16) {  // rounded up to the next power of two
      m = 8;
      ++be;
    }
    return sign | std::uint8_t(be << 3 | (m - 8));
  }
  static float decode(std::uint8_t b) noexcept {
    const unsigned e = (b >> 3) & 15u, m = b & 7u;
    const float mag = e == 0 ? float(m) * 0x1p-9f : float(8 + m) * std::bit_cast<float>((e + 127u - 10u) << 23);
    return b & 0x80 ? -mag : mag;
  }
};

template <>
struct cache_format<float8_e4m3> {
  static constexpr bool is_format = true;
  static constexpr bool quantized = true;
  using code = float8_e4m3;
  static constexpr std::size_t group = 32;
  static constexpr const char* name = "float8_e4m3 (scale per 32)";
  static constexpr std::string_view format = "f8_e4m3";

  template <class X>
  static float quantize(const X* x, std::ptrdiff_t xs, std::size_t n, float8_e4m3* out) noexcept {
    float amax = 0;
    for (std::size_t d = 0; d < n; ++d) amax = std::max(amax, std::abs(float(x[std::ptrdiff_t(d) * xs])));
    const float s = amax / float8_e4m3::max, inv = s > 0 ? 1.0f / s : 0.0f;
    for (std::size_t d = 0; d < n; ++d) out[d] = float8_e4m3(float(x[std::ptrdiff_t(d) * xs]) * inv);
    return s;
  }
  static float value(float8_e4m3 c, float scale) noexcept { return float(c) * scale; }

  /// E4M3 shifted into a float16's bit positions is that float16 times 2^-8 (subnormals too): the
  /// ISA's float16 conversion decodes a batch, and 256 · scale (exact) restores it, one rounding
  /// as value() has.
  template <class A>
  static constexpr bool widens = std::is_same_v<A, float>&& simd::avx2_or_avx512&& simd::detail::f16c;
  template <class A>
  static simd::batch<A> batch(const float8_e4m3* p, float scale) noexcept {
    using B = simd::batch<A>;
    if constexpr (simd::width<A> == 16) {
      const __m256i x = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x80)), 8),
                                        _mm256_slli_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x7f)), 7));
      return B(_mm512_cvtph_ps(h)) * B(256.0f * scale);
    } else {
      const __m128i x = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(x, _mm_set1_epi16(0x80)), 8),
                                     _mm_slli_epi16(_mm_and_si128(x, _mm_set1_epi16(0x7f)), 7));
      return B(_mm256_cvtph_ps(h)) * B(256.0f * scale);
    }
  }
};

}  // namespace xattn
