#pragma once
// 4-bit pages as llama.cpp's q4_0 stores them: per token and head, one scale per group of 32
// features, d = m / -8 with m the group's feature of largest magnitude (its sign kept), each
// feature min(15, floor(x / d + 8.5)), a value (code - 8) · d. A group's 32 codes are 16 bytes,
// byte j holding feature j in its low nibble and feature j + 16 in its high one, so that 16 (or 8)
// consecutive features are one nibble of 16 (8) consecutive bytes: one widening load decodes
// them. The scale is a float (q4_0's is a float16): 20 bytes per 32 features against q4_0's 18.
// A cache's keys interleave their rows by pairs of these bytes (row_layout), which the integer
// score product reads 16 keys at a time (kernel/qk_q4.hpp); values stand one row after the other.
#include "../../kernel/packed_pair_row.hpp"
#include "../../simd/compat.hpp"
#include "../format.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace xattn {

/// Two 4-bit codes in a byte (cache_format<q4> says which features).
struct q4 {
  std::uint8_t bits = 0;
};

template <>
struct cache_format<q4> {
  static constexpr bool is_format = true;
  static constexpr bool quantized = true;
  using code = q4;
  static constexpr std::size_t group = 32;
  static constexpr std::size_t features_per_code = 2;
  static constexpr const char* name = "q4 (q4_0: 4 bits, scale per 32)";
  static constexpr std::string_view format = "q4_0";
  static constexpr bool interleaves_keys = true;

  /// n <= 32 features (xs apart) into the group's 16 codes at out; features past n are code 8 (zero).
  template <class X>
  static float quantize(const X* x, std::ptrdiff_t xs, std::size_t n, q4* out) noexcept {
    float amax = 0, m = 0;
    for (std::size_t d = 0; d < n; ++d) {
      const float v = float(x[std::ptrdiff_t(d) * xs]);
      if (amax < std::abs(v)) amax = std::abs(v), m = v;
    }
    const float s = m / -8.0f, inv = s != 0 ? 1.0f / s : 0.0f;
    const auto code = [&](std::size_t d) {
      if (d >= n) return 8u;
      return unsigned(std::min(15.0f, std::floor(float(x[std::ptrdiff_t(d) * xs]) * inv + 8.5f)));
    };
    for (std::size_t j = 0; j < group / 2; ++j) out[j].bits = std::uint8_t(code(j) | code(j + group / 2) << 4);
    return s;
  }

  /// The code (byte) of a row that holds feature i, and feature i's value from it.
  static constexpr std::size_t code_index(std::size_t i) noexcept { return i / group * (group / 2) + i % (group / 2); }
  static float feature_value(q4 code, std::size_t i, float scale) noexcept {
    const unsigned c = (code.bits >> (i % group / (group / 2) * 4)) & 15u;
    return float(int(c) - 8) * scale;
  }
  /// Feature i of a row whose codes start at row.
  static float value_at(const q4* row, std::size_t i, float scale) noexcept {
    return feature_value(row[code_index(i)], i, scale);
  }
  /// Row handles: keys interleaved by pairs of bytes (scale_stride apart), values alone.
  static kernel::packed_pair_row<cache_format> row(const q4* q, const float* scale, std::size_t col,
                                                   const row_layout& at) noexcept {
    return {q, scale, col, at.scale_stride};
  }

  /// Features [col, col + width) decoded in registers (col a multiple of the width: one nibble of
  /// consecutive bytes) to (c - 8) · scale, the one rounding value_at has: with AVX-512, each code
  /// picks its value from the 16 products (i - 8) · scale (vpermps reads an index's low 4 bits, so
  /// a byte's low nibble needs no mask); with AVX2, c - 8 in integers, then one product.
  template <class A>
  static constexpr bool widens = std::is_same_v<A, float>&& simd::avx2_or_avx512;
  template <class A>
  static simd::batch<A> batch(const q4* row, std::size_t col, float scale) noexcept {
    using B = simd::batch<A>;
    const std::size_t o = col % group;
    const auto* p = reinterpret_cast<const std::uint8_t*>(row) + col / group * (group / 2) + o % (group / 2);
    const __m128i shift = _mm_cvtsi32_si128(int(o / (group / 2) * 4));
    if constexpr (simd::width<A> == 16) {
      const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return B(_mm512_permutexvar_ps(_mm512_srl_epi32(x, shift), values<A>(scale)));
    } else {
      const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      const __m256i c = _mm256_and_si256(_mm256_srl_epi32(x, shift), _mm256_set1_epi32(15));
      return B(_mm256_cvtepi32_ps(_mm256_sub_epi32(c, _mm256_set1_epi32(8)))) * B(scale);
    }
  }

  /// CC batches of whole groups from feature col (a multiple of 32) on, scales[g] group g's: with
  /// AVX-512 each group's 16 bytes loaded once for both nibbles, then batch's lookups (the same
  /// bits); with AVX2, batch after batch. Decoding's P·V reads whole value rows.
  template <class A, std::size_t CC>
  static constexpr bool decodes_groups = (CC * simd::width<A> % group == 0) && widens<A>;
  template <class A, std::size_t CC>
  static void batches(const q4* row, std::size_t col, const float* scales, simd::batch<A> (&out)[CC]) noexcept {
    using B = simd::batch<A>;
    constexpr std::size_t w = simd::width<A>, per_group = group / w;
    for (std::size_t g = 0; g < CC / per_group; ++g) {
      if constexpr (w == 16) {  // bytes: features [0, 16) (low nibbles) and [16, 32) (high)
        const auto* at = reinterpret_cast<const std::uint8_t*>(row) + col / 2 + g * (group / 2);
        const __m512 table = values<A>(scales[g]);
        const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
        out[2 * g] = B(_mm512_permutexvar_ps(x, table));
        out[2 * g + 1] = B(_mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), table));
      } else {
        for (std::size_t h = 0; h < per_group; ++h)
          out[g * per_group + h] = batch<A>(row, col + g * group + h * w, scales[g]);
      }
    }
  }

 private:
  /// The 16 values (i - 8) · scale, i the lane (a template: AVX-512 registers only where used).
  template <class A>
  static auto values(float scale) noexcept {
    const __m512 codes = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    return _mm512_mul_ps(codes, _mm512_set1_ps(scale));
  }
};

}  // namespace xattn
