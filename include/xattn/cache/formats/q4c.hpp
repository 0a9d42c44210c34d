#pragma once
// 4-bit keys quantized per channel over a page's tokens, as KIVI quantizes keys: each feature
// (channel) of a head has one scale and one minimum taken over the page's rows, so a channel
// that is large on every token (the outlier channels of LLM keys) gets a step of its own instead
// of widening every step of its tokens' groups. A value is code · scale + min (one rounding), the
// code in [0, 15] rounded to nearest. Codes are packed as q4's (byte j of a group of 32 holds
// feature j in its low nibble, j + 16 in its high one); a page's parameters are, per group of 32
// features, its 32 scales then its 32 minimums. The cache keeps the float rows of each sequence's partial page and
// quantizes that page again as rows arrive (kv_cache), so a page's parameters always cover the
// rows it holds.
#include "../../kernel/row_handle.hpp"
#include "../../simd/compat.hpp"
#include "../format.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn {

/// Two 4-bit codes in a byte of a page of keys quantized per channel (cache_format<q4c>).
struct q4c {
  std::uint8_t bits = 0;
};

template <>
struct cache_format<q4c> {
  static constexpr bool is_format = true;
  static constexpr bool quantized = true;
  static constexpr bool per_channel = true;
  using code = q4c;
  static constexpr std::size_t group = 32;
  static constexpr std::size_t features_per_code = 2;
  static constexpr const char* name = "q4c (4 bits, keys scaled per channel over a page)";
  static constexpr std::string_view format = "q4c";

  /// Floats of a page's parameters for dim features: a scale and a minimum per feature, by groups.
  static constexpr std::size_t parameters(std::size_t dim) noexcept { return (dim + group - 1) / group * 2 * group; }
  static constexpr std::size_t scale_at(std::size_t i) noexcept { return i / group * 2 * group + i % group; }
  static constexpr std::size_t min_at(std::size_t i) noexcept { return scale_at(i) + group; }

  /// Rows [0, n) of dim features (x, row after row) into a page's codes (row_codes apart) and
  /// parameters; features past dim in the last group decode to zero.
  static void quantize_page(const float* x, std::size_t n, std::size_t dim, q4c* codes, std::size_t row_codes,
                            float* param) noexcept {
    const std::size_t padded = parameters(dim) / 2;
    for (std::size_t d = 0; d < padded; ++d) {
      float lo = 0, hi = 0;
      if (d < dim && n > 0) {
        lo = hi = x[d];
        for (std::size_t r = 1; r < n; ++r) lo = std::min(lo, x[r * dim + d]), hi = std::max(hi, x[r * dim + d]);
      }
      const float s = (hi - lo) / 15.0f, inv = s > 0 ? 1.0f / s : 0.0f;
      param[scale_at(d)] = s;
      param[min_at(d)] = lo;
      const std::size_t o = d % group, byte = d / group * (group / 2) + o % (group / 2);
      const unsigned shift = unsigned(o / (group / 2) * 4);
      for (std::size_t r = 0; r < n; ++r) {
        const unsigned c =
            d < dim ? unsigned(std::min(15.0f, std::floor(std::fma(x[r * dim + d] - lo, inv, 0.5f)))) : 0u;
        std::uint8_t& b = codes[r * row_codes + byte].bits;
        b = std::uint8_t((b & ~(15u << shift)) | c << shift);
      }
    }
  }

  /// Feature i of a row whose codes start at row, the page's parameters at param.
  static float value_at(const q4c* row, std::size_t i, const float* param) noexcept {
    const std::size_t o = i % group;
    const unsigned c = (row[i / group * (group / 2) + o % (group / 2)].bits >> (o / (group / 2) * 4)) & 15u;
    return std::fma(float(c), param[scale_at(i)], param[min_at(i)]);  // one rounding, as batch's
  }

  template <class A>
  static constexpr bool widens = std::is_same_v<A, float>&& simd::avx2_or_avx512;
  /// Features [col, col + width) decoded in registers (col a multiple of the width: one nibble of
  /// consecutive bytes, one group's parameters): code · scale + min, the rounding value_at has.
  template <class A>
  static simd::batch<A> batch(const q4c* row, std::size_t col, const float* param) noexcept {
    using B = simd::batch<A>;
    const std::size_t o = col % group;
    const auto* p = reinterpret_cast<const std::uint8_t*>(row) + col / group * (group / 2) + o % (group / 2);
    const __m128i shift = _mm_cvtsi32_si128(int(o / (group / 2) * 4));
    const B s = B::load_unaligned(param + scale_at(col)), m = B::load_unaligned(param + min_at(col));
    if constexpr (simd::width<A> == 16) {
      const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      const __m512i c = _mm512_and_si512(_mm512_srl_epi32(x, shift), _mm512_set1_epi32(15));
      return B(_mm512_fmadd_ps(_mm512_cvtepi32_ps(c), s, m));
    } else {
      const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      const __m256i c = _mm256_and_si256(_mm256_srl_epi32(x, shift), _mm256_set1_epi32(15));
#if defined(__FMA__)
      return B(_mm256_fmadd_ps(_mm256_cvtepi32_ps(c), s, m));
#else  // AVX2 built without FMA: the lanes one by one, still rounded once
      alignas(32) float x8[8], s8[8], m8[8];
      _mm256_store_ps(x8, _mm256_cvtepi32_ps(c)), s.store_aligned(s8), m.store_aligned(m8);
      for (std::size_t i = 0; i < 8; ++i) x8[i] = std::fma(x8[i], s8[i], m8[i]);
      return B::load_aligned(x8);
#endif
    }
  }

  /// A row of a page: its codes and the page's parameters (every row of the page shares them).
  struct row_handle {
    using element = q4c;
    static constexpr std::string_view format = "q4c";
    const q4c* q = nullptr;        // the row's first code
    const float* param = nullptr;  // the page's parameters
    std::size_t col = 0;           // the feature this handle starts at

    float operator[](std::ptrdiff_t d) const noexcept { return value_at(q, col + std::size_t(d), param); }
    row_handle operator+(std::size_t d) const noexcept { return {q, param, col + d}; }
    /// The same feature of the row `codes` codes further in its page (the parameters stay).
    row_handle step(std::size_t codes, std::size_t) const noexcept { return {q + codes, param, col}; }
    template <class T>
    simd::batch<T> load() const noexcept {
      constexpr std::size_t w = simd::width<T>;
      if constexpr (widens<T>)
        if (col % w == 0) return batch<T>(q, col, param);
      alignas(64) std::array<T, w> lanes;
      for (std::size_t i = 0; i < w; ++i) lanes[i] = T((*this)[std::ptrdiff_t(i)]);
      return simd::batch<T>::load_aligned(lanes.data());
    }
    /// The codes' cache lines; the parameters, shared by the page's rows, stay in cache.
    template <int Locality>
    [[gnu::always_inline]] void prefetch(std::size_t bytes) const noexcept {
      kernel::prefetch_row<Locality>(q + col / 2, (bytes / sizeof(q4c) + 1) / 2);
    }
  };
  static row_handle row(const q4c* q, const float* param, std::size_t col, const row_layout&) noexcept {
    return {q, param, col};
  }
};

}  // namespace xattn

#pragma GCC diagnostic pop
