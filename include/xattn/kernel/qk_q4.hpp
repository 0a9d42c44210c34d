#pragma once
// The score product of float queries and 4-bit (q4_0) key rows read in place, on integer
// products: each query row rounded once to int16 codes with one scale, as for int8 keys
// (qk_q8.hpp), so the same bound holds. Two groups' 64 nibbles are 32 bytes of a row, widened to
// int16 by one load and split by a mask and a shift; their products with the query codes (permuted
// to that order) add up exactly in int32 (vpdpwssd) from q4_0's offset, -8 times the lane's query
// codes, and each lane's sum is converted and scaled by its group's scale in float. Per key and 64
// features that is four instructions for the key and four per query row (two integer products, a
// conversion, an FMA), where keys dequantized to floats take four FMAs per row after their decoding.
#include "../cache/formats/q4.hpp"
#include "qk_q8.hpp"
#include "scaled_row.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

/// A row of a cache's q4 page (rows one after the other, one scale per 32 features).
using q4_row = scaled_row<cache_format<q4>>;

/// Whether this build multiplies q4 keys on int16 products: AVX-512BW batches of float (the
/// 64-feature step fills one 512-bit register; AVX2 builds dequantize the keys instead).
#if defined(__AVX512BW__)
inline constexpr bool has_q4_products = std::is_base_of_v<xsimd::avx512f, simd::batch<float>::arch_type>;
#else
inline constexpr bool has_q4_products = false;
#endif

/// Features per step of the q4 products: two groups, 32 bytes of codes.
inline constexpr std::size_t q4_step = 2 * cache_format<q4>::group;

/// Whether qk_direct_q4 takes `rows` queries of n features (else the caller's float path runs).
constexpr bool q4_products_take(std::size_t rows, std::size_t n) noexcept {
  return has_q4_products && n % q4_step == 0 && rows * n <= detail::q16_stack;
}

namespace detail {

/// A step's query codes in the order its key codes widen to: words [0, 16) and [16, 32) of the
/// first register are features [0, 16) and [32, 48) (low nibbles of the two groups' 16 bytes), of
/// the second [16, 32) and [48, 64) (high nibbles); and per int32 lane, -8 times the four codes
/// that lane multiplies (q4_0's value is code - 8).
inline void q4_query_order(const std::int16_t* codes, std::size_t n, std::int16_t* out, std::int32_t* offset) noexcept {
  for (std::size_t b = 0; b < n; b += q4_step) {
    for (std::size_t i = 0; i < 16; ++i) {
      out[b + i] = codes[b + i];
      out[b + 16 + i] = codes[b + 32 + i];
      out[b + 32 + i] = codes[b + 16 + i];
      out[b + 48 + i] = codes[b + 48 + i];
    }
    for (std::size_t l = 0; l < 16; ++l)
      offset[b / 4 + l] =
          -8 * (std::int32_t(out[b + 2 * l]) + out[b + 2 * l + 1] + out[b + 32 + 2 * l] + out[b + 33 + 2 * l]);
  }
}

/// acc + the products of adjacent int16 pairs of a and b, in int32 lanes (a template: AVX-512
/// registers only where it is used).
template <class I>
[[gnu::always_inline]] inline I pair_products(I acc, I a, I b) noexcept {
#if defined(__AVX512VNNI__)
  return _mm512_dpwssd_epi32(acc, a, b);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}

/// s[r, t] for R rows of ordered query codes (n apart, offsets n / 4 apart, scales qs[r]) and the
/// 4 keys k[0..3], n a multiple of 64 and every key's column a step's start; the first `kept` keys
/// written. Per (row, key) the lanes accumulate the steps in order, then one tree sums them: the
/// same bits however the rows are blocked.
template <std::size_t R>
inline void qk_q4_micro(const std::int16_t* q, const std::int32_t* offset, std::size_t n, const float* qs,
                        const q4_row* k, float* s, std::size_t lds, std::size_t kept) {
  using B = simd::batch<float>;
  B acc[R][4];
  each(upto<R * 4>, [&](auto i) { acc[i / 4][i % 4] = B(0.0f); });
  const std::uint8_t* codes[4];
  const float* scales[4];
  each(upto<4>, [&](auto c) {
    codes[c] = reinterpret_cast<const std::uint8_t*>(k[c].q) + k[c].col / 2;
    scales[c] = k[c].scale + k[c].col / cache_format<q4>::group;
  });
  const __m512i nibble = _mm512_set1_epi16(15);
  const __m512i first_group = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);  // lanes 8..15: scale 1
  for (std::size_t d = 0; d < n; d += q4_step) {
    __m512i lo[4], hi[4];
    __m512 ks[4];
    each(upto<4>, [&](auto c) {
      const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes[c] + d / 2)));
      lo[c] = _mm512_and_si512(x, nibble);
      hi[c] = _mm512_srli_epi16(x, 4);  // a byte's high nibble: nothing above it after the widening
      const __m128 two = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales[c] + d / 32)));
      ks[c] = _mm512_permutexvar_ps(first_group, _mm512_castps128_ps512(two));
    });
    each(upto<R>, [&](auto r) {
      const __m512i qa = _mm512_loadu_si512(q + r * n + d), qb = _mm512_loadu_si512(q + r * n + d + 32);
      const __m512i off = _mm512_loadu_si512(offset + r * (n / 4) + d / 4);
      each(upto<4>, [&](auto c) {
        const __m512i sums = pair_products(pair_products(off, lo[c], qa), hi[c], qb);
        acc[r][c] = B(_mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), ks[c], acc[r][c]));
      });
    });
  }
  each(upto<R * 4>, [&](auto i) { acc[i / 4][i % 4] *= B(qs[i / 4]); });
  store_sums<R>(
      acc, 1.0f, false, [](std::size_t, float sum) { return sum; }, s, lds, kept);
}

}  // namespace detail

/// qk_direct for q4 key rows (all starting at the same column) on int16 query codes. Returns
/// false, having written nothing, where it does not apply: a build without the products, n not
/// whole steps of 64, more query features than its stack holds, keys not starting a step, or a
/// query that is not finite.
template <class RowFn>
bool qk_direct_q4(const float* q, std::size_t ldq, std::size_t rows, RowFn row, std::size_t cols, std::size_t n,
                  float* s, std::size_t lds, row_prefetch also = {}) {
  if constexpr (!has_q4_products || !std::is_same_v<decltype(row(0)), q4_row>) {
    return false;
  } else {
    constexpr std::size_t rmax = detail::direct_rows<float>;
    if (!q4_products_take(rows, n) || cols == 0 || row(0).col % q4_step != 0) return false;
    alignas(64) std::int16_t codes[detail::q16_stack], ordered[detail::q16_stack];
    alignas(64) std::int32_t offsets[detail::q16_stack / 4];
    float scales[detail::q16_stack / q4_step];
    for (std::size_t r = 0; r < rows; ++r) {
      scales[r] = detail::quantize_query16(q + r * ldq, n, codes + r * n);
      if (std::isnan(scales[r])) return false;
      detail::q4_query_order(codes + r * n, n, ordered + r * n, offsets + r * (n / 4));
    }
    trace::note(op_on<q4_row>(operation::qk_direct));
    detail::direct_blocks<rmax>(
        rows, row, cols, n, s, lds,
        [&](auto R, std::size_t r, const q4_row* k, float* sb, std::size_t kept) {
          detail::qk_q4_micro<decltype(R)::value>(ordered + r * n, offsets + r * (n / 4), n, scales + r, k, sb, lds,
                                                  kept);
        },
        also);
    return true;
  }
}

/// qk_direct on q4 key rows: by qk_direct_q4's integer products where they apply, else
/// dequantized in registers as any format's rows.
template <class RowFn>
requires std::is_same_v<row_element_t<std::invoke_result_t<const RowFn&, std::size_t>>, q4>
void qk_direct(const float* q, std::size_t ldq, std::size_t rows, RowFn row, std::size_t cols, std::size_t n, float* s,
               std::size_t lds, row_prefetch also = {}) {
  if (!qk_direct_q4(q, ldq, rows, row, cols, n, s, lds, also))
    detail::qk_direct_widened(q, ldq, rows, row, cols, n, s, lds, also);
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
