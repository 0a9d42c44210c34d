#pragma once
// The score product of float queries and int8 (q8_0) key rows read in place, on integer products:
// each query row rounded once to int16 codes with one scale, a group's 32 products summed exactly
// in int32 (vpmaddwd), and each group's sum converted and scaled by its key scale in float: two
// float operations per group and key where dequantizing the keys takes six. A cache's key pages
// interleave their rows by pairs of features, so that the products of 16 keys add up in the lanes
// of one register (vpdpwssd where AVX512-VNNI has it), with no reduction across lanes. The
// rounding moves a query feature by at most max|q| / 65534, about 250 times less than q8_0 moves
// a key's.
#include "../simd/int16_pairs.hpp"
#include "pair_blocks.hpp"
#include "q8_row.hpp"
#include "qk.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

namespace detail {

/// The largest query code, and the most query features (rows · n) a call rounds on its stack.
inline constexpr float q16_max = 32767.0f;
inline constexpr std::size_t q16_stack = 4096;

}  // namespace detail

/// Whether qk_direct_q8 takes `rows` queries of n features (else the caller's float path runs;
/// queries holding an inf or a NaN go there too, found as they are rounded).
constexpr bool q8_products_take(std::size_t rows, std::size_t n) noexcept {
  return has_q8_products && n % q8_row::group == 0 && rows * n <= detail::q16_stack;
}

namespace detail {

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
  each(upto<R * 4>, [&](auto i) { acc[i / 4][i % 4] = B(0.0f); });
  const std::int8_t* codes[4];
  const float* scales[4];
  each(upto<4>, [&](auto c) {
    codes[c] = k[c].q + k[c].col;
    scales[c] = k[c].scale + k[c].col / q8_row::group;
  });
  for (std::size_t g = 0, d = 0; d < n; ++g, d += q8_row::group)
    each(upto<4>, [&](auto c) {
      const B scale(scales[c][g]);
      each(upto<R>,
           [&](auto r) { acc[r][c] = xsimd::fma(group_products<B>(q + r * ldq + d, codes[c] + d), scale, acc[r][c]); });
    });
  each(upto<R * 4>, [&](auto i) { acc[i / 4][i % 4] *= B(qs[i / 4]); });
  store_sums<R>(
      acc, 1.0f, false, [](std::size_t, float sum) { return sum; }, s, lds, kept);
}

/// The exact int32 sum of the 32 products of query codes q and the codes of key k's group that
/// starts at feature i (from the row's start; a multiple of 32).
inline std::int32_t group_sum(const std::int16_t* q, const q8_pair_row& k, std::size_t i) noexcept {
  std::int32_t sum = 0;  // integers: exact in any order
  for (std::size_t d = 0; d < q8_row::group; ++d) sum += std::int32_t(q[d]) * k.q[k.code_at(i + d)];
  return sum;
}

/// One score: qs · the groups' sums, each exact in int32, converted and times its key scale in
/// float, added group after group. qk_q8_pairs computes exactly this in its lanes, so a key's
/// score has the same bits whichever path reads its page.
inline float key_score(const std::int16_t* q, float qs, const q8_pair_row& k, std::size_t n) noexcept {
  float f = 0.0f;
  for (std::size_t d = 0; d < n; d += q8_row::group)
    f = std::fma(float(group_sum(q + d, k, k.col + d)), *k.scale_at(k.col + d), f);
  return f * qs;
}

/// Key k's n codes from its column on, out of its page's pairs into out[0, n) in feature order
/// (a pair of features is two adjacent bytes; pairs are 2 · page_rows bytes apart).
inline void row_codes(const q8_pair_row& k, std::size_t n, std::int8_t* out) noexcept {
  const std::int8_t* at = k.q + k.code_at(k.col);  // col even: a pair's start
  const std::size_t step = 2 * k.page_rows;
  for (std::size_t i = 0; i < n; i += 2, at += step) std::memcpy(out + i, at, 2);
}

/// The exact int32 sum of the 32 products of query codes q and key codes k (one group, contiguous).
inline std::int32_t group_sum(const std::int16_t* q, const std::int8_t* k) noexcept {
#if defined(__AVX512BW__)
  const __m512i k16 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k)));
  return _mm512_reduce_add_epi32(_mm512_madd_epi16(_mm512_loadu_si512(q), k16));
#elif defined(__AVX2__)
  const __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k)));
  const __m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + 16)));
  const __m256i p =
      _mm256_add_epi32(_mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), lo),
                       _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 16)), hi));
  const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
  const __m128i h2 = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  return _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 0xb1)));
#else
  std::int32_t sum = 0;
  for (std::size_t d = 0; d < q8_row::group; ++d) sum += std::int32_t(q[d]) * k[d];
  return sum;
#endif
}

/// key_score of a key whose codes row_codes has gathered: the same sums, in the same order, so
/// the same bits.
inline float key_score(const std::int16_t* q, float qs, const std::int8_t* codes, const q8_pair_row& k,
                       std::size_t n) noexcept {
  float f = 0.0f;
  for (std::size_t d = 0; d < n; d += q8_row::group)
    f = std::fma(float(group_sum(q + d, codes + d)), *k.scale_at(k.col + d), f);
  return f * qs;
}

/// s[r, t] = key_score of R query rows (codes ldq apart, scales qs[r]) and the pair block from k0
/// (in_pair_block), n a multiple of 32; the first `kept` keys written. A pair of features of the
/// 16 keys is one vector of int16 pairs, each lane one key: the products add up in the lanes, with
/// no reduction across them, and the 16 keys' scales of a group are one load.
template <std::size_t R, class B = simd::batch<float>>  // B a parameter: int16_pairs exists only where it is used
inline void qk_q8_pairs(const std::int16_t* q, std::size_t ldq, const float* qs, const q8_pair_row& k0, std::size_t n,
                        float* s, std::size_t lds, std::size_t kept) {
  using L = simd::int16_pairs<sizeof(B)>;
  using I = typename L::type;
  constexpr std::size_t halves = sizeof(B) == 64 ? 1 : 2;  // AVX2: 8 keys per vector
  constexpr std::size_t lanes = pair_block / halves;
#if defined(__AVX512VNNI__)
  constexpr std::size_t chains = halves == 1 && R == 1 ? 4 : halves == 1 ? 2 : 1;  // vpdpwssd's latency
#else
  constexpr std::size_t chains = 1;  // the chain is one integer add per pair
#endif
  const std::int8_t* codes = k0.q + k0.code_at(k0.col);
  const float* scales = k0.scale_at(k0.col);
  const std::size_t ps = 2 * k0.page_rows, ss = k0.page_rows;
  B f[R][halves];
  each(upto<R * halves>, [&](auto i) { f[i / halves][i % halves] = B(0.0f); });
  for (std::size_t g = 0; g < n / q8_row::group; ++g) {
    I acc[R][halves][chains];
    each(upto<R * halves * chains>,
         [&](auto i) { acc[i / (halves * chains)][i / chains % halves][i % chains] = L::zero(); });
    for (std::size_t p = 0; p < q8_row::group / 2; p += chains)
      each(upto<chains>, [&](auto u) {
        const std::size_t pair = g * q8_row::group / 2 + p + u;
        each(upto<halves>, [&](auto h) {
          const I k = L::widen(codes + pair * ps + h * 2 * lanes);
          each(upto<R>, [&](auto r) {
            std::int32_t qp;
            std::memcpy(&qp, q + r * ldq + 2 * pair, sizeof qp);
            acc[r][h][u] = L::products(acc[r][h][u], k, qp);
          });
        });
      });
    add_group_sums<L>(acc, scales + g * ss, f);
  }
  store_pair_scores(f, qs, s, lds, kept);
}

}  // namespace detail

/// qk_direct for q8_0 key rows (all starting at the same column) on int16 query codes; rows
/// interleaved by pairs (a cache's keys) by blocks of 16 (pair_blocks). Returns
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
    if (!q8_products_take(rows, n) || cols == 0 || row(0).col % q8_row::group != 0) return false;
    alignas(64) std::int16_t codes[detail::q16_stack];
    float scales[detail::q16_stack / q8_row::group];
    for (std::size_t r = 0; r < rows; ++r) {
      scales[r] = detail::quantize_query16(q + r * ldq, n, codes + r * n);
      if (std::isnan(scales[r])) return false;
    }
    trace::note(op_on<q8_pair_row>(operation::qk_direct));
    if constexpr (std::is_same_v<decltype(row(0)), q8_pair_row>) {
      detail::pair_blocks(
          rows, row, cols, n, s, lds, also,
          [&](auto R, std::size_t r, const q8_pair_row& k0, float* sb, std::size_t kept) {
            detail::qk_q8_pairs<decltype(R)::value>(codes + r * n, n, scales + r, k0, n, sb, lds, kept);
          },
          [&](const q8_pair_row& k, float* sk) {  // once for all the query rows
            alignas(64) std::int8_t key[detail::q16_stack];
            detail::row_codes(k, n, key);
            for (std::size_t r = 0; r < rows; ++r) sk[r * lds] = detail::key_score(codes + r * n, scales[r], key, k, n);
          });
    } else {
      detail::direct_blocks<rmax>(
          rows, row, cols, n, s, lds,
          [&](auto R, std::size_t r, const q8_row* k, float* sb, std::size_t kept) {
            detail::qk_q8_micro<decltype(R)::value>(codes + r * n, n, scales + r, k, n, sb, lds, kept);
          },
          also);
    }
    return true;
  }
}

/// qk_direct on int8 (q8_0) key rows: by qk_direct_q8's integer products where they apply, else
/// dequantized in registers as any format's rows.
template <class RowFn>
requires std::is_same_v<row_element_t<std::invoke_result_t<const RowFn&, std::size_t>>, std::int8_t>
void qk_direct(const float* q, std::size_t ldq, std::size_t rows, RowFn row, std::size_t cols, std::size_t n, float* s,
               std::size_t lds, row_prefetch also = {}) {
  if (!qk_direct_q8(q, ldq, rows, row, cols, n, s, lds, also))
    detail::qk_direct_widened(q, ldq, rows, row, cols, n, s, lds, also);
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
