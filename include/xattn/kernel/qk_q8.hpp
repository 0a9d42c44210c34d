#pragma once
// The score product of float queries and int8 (q8_0) key rows read in place, on integer products:
// each query row rounded once to int16 codes with one scale, a group's 32 products summed exactly
// in int32 (vpmaddwd), and each group's sum converted and scaled by its key scale in float: two
// float operations per group and key where dequantizing the keys takes six. The rounding moves a
// query feature by at most max|q| / 65534, about 250 times less than q8_0 moves a key's.
#include "q8_row.hpp"
#include "qk.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

/// Whether this build multiplies int8 keys on int16 products: AVX-512BW or AVX2 batches of float.
#if defined(__AVX512BW__)
inline constexpr bool has_q8_products = std::is_base_of_v<xsimd::avx512f, simd::batch<float>::arch_type>;
#elif defined(__AVX2__)
inline constexpr bool has_q8_products = std::is_base_of_v<xsimd::avx2, simd::batch<float>::arch_type>;
#else
inline constexpr bool has_q8_products = false;
#endif

namespace detail {

/// The largest query code, and the most query features (rows · n) a call rounds on its stack.
inline constexpr float q16_max = 32767.0f;
inline constexpr std::size_t q16_stack = 4096;

/// q[:n] (n a multiple of the float width) as int16 codes round(q / scale), scale = max|q| / 32767,
/// into out; returns the scale: 0 for a zero row, NaN when q holds an inf or a NaN (whose products
/// only the float path gets right).
inline float quantize_query16(const float* q, std::size_t n, std::int16_t* out) noexcept {
  using B = simd::batch<float>;
  constexpr std::size_t w = simd::width<float>;
  B m(0.0f), nonfinite(0.0f);  // x · 0 is 0 for finite x, NaN for inf and NaN (which max may drop)
  for (std::size_t d = 0; d < n; d += w) {
    const B x = simd::load(q + d);
    m = xsimd::max(m, xsimd::abs(x));
    nonfinite += x * B(0.0f);
  }
  const float amax = simd::hmax(m);
  if (xsimd::any(xsimd::isnan(nonfinite)) || !std::isfinite(amax)) return std::nanf("");
  const B inv(amax > 0 ? q16_max / amax : 0.0f);
  alignas(64) std::int32_t lanes[w];
  for (std::size_t d = 0; d < n; d += w) {
    xsimd::nearbyint_as_int(simd::load(q + d) * inv).store_aligned(lanes);
    for (std::size_t i = 0; i < w; ++i) out[d + i] = std::int16_t(lanes[i]);  // |code| <= 32767
  }
  return amax / q16_max;
}

/// The int32 sums of the 32 products of query codes q and key codes k (one group), as floats: 16
/// lanes of two products (AVX-512) or 8 of four (AVX2). Keys are read 16 bytes at a time: from
/// memory, 32-byte reads stream a decoding step's keys a sixth more slowly (measured on Zen 5).
template <class B>
inline B group_products(const std::int16_t* q, const std::int8_t* k) noexcept {
  const __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k)));
  const __m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + 16)));
  if constexpr (sizeof(B) == 64) {
    const __m512i k16 = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return B(_mm512_cvtepi32_ps(_mm512_madd_epi16(_mm512_loadu_si512(q), k16)));
  } else {
    const __m256i p =
        _mm256_add_epi32(_mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), lo),
                         _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 16)), hi));
    return B(_mm256_cvtepi32_ps(p));
  }
}

/// s[r, t] for R rows of query codes (ldq apart, scales qs[r]) and the 4 keys k[0..3], n a
/// multiple of 32 and every key's column a group's start; the first `kept` keys written.
template <std::size_t R>
inline void qk_q8_micro(const std::int16_t* q, std::size_t ldq, const float* qs, const q8_row* k, std::size_t n,
                        float* s, std::size_t lds, std::size_t kept) {
  using B = simd::batch<float>;
  B acc[R][4];
  each<R * 4>([&](auto i) { acc[i / 4][i % 4] = B(0.0f); });
  const std::int8_t* codes[4];
  const float* scales[4];
  each<4>([&](auto c) {
    codes[c] = k[c].q + k[c].col;
    scales[c] = k[c].scale + k[c].col / q8_row::group;
  });
  for (std::size_t g = 0, d = 0; d < n; ++g, d += q8_row::group)
    each<4>([&](auto c) {
      const B scale(scales[c][g]);
      each<R>(
          [&](auto r) { acc[r][c] = xsimd::fma(group_products<B>(q + r * ldq + d, codes[c] + d), scale, acc[r][c]); });
    });
  each<R * 4>([&](auto i) { acc[i / 4][i % 4] *= B(qs[i / 4]); });
  store_sums<R>(
      acc, 1.0f, false, [](std::size_t, float sum) { return sum; }, s, lds, kept);
}

}  // namespace detail

/// qk_direct for q8_0 key rows (all starting at the same column) on int16 query codes. Returns
/// false, having written nothing, where it does not apply: a build without the products, n not
/// whole groups, more query features than its stack holds, keys not starting a group, or a query
/// that is not finite.
template <class RowFn>
bool qk_direct_q8(const float* q, std::size_t ldq, std::size_t rows, RowFn row, std::size_t cols, std::size_t n,
                  float* s, std::size_t lds, row_prefetch also = {}) {
  if constexpr (!has_q8_products) {
    return false;
  } else {
    constexpr std::size_t rmax = detail::direct_rows<float>;
    if (n % q8_row::group != 0 || rows * n > detail::q16_stack || cols == 0 || row(0).col % q8_row::group != 0)
      return false;
    alignas(64) std::int16_t codes[detail::q16_stack];
    float scales[detail::q16_stack / q8_row::group];
    for (std::size_t r = 0; r < rows; ++r) {
      scales[r] = detail::quantize_query16(q + r * ldq, n, codes + r * n);
      if (std::isnan(scales[r])) return false;
    }
    trace::note(tile_op::qk_direct);
    detail::direct_blocks<rmax>(
        rows, row, cols, n, s, lds,
        [&](auto R, std::size_t r, const q8_row* k, float* sb, std::size_t kept) {
          detail::qk_q8_micro<decltype(R)::value>(codes + r * n, n, scales + r, k, n, sb, lds, kept);
        },
        also);
    return true;
  }
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
