#pragma once
// The score product of float queries and 4-bit (q4_0) key rows read in place, on integer
// products: each query row rounded once to int16 codes with one scale, as for int8 keys
// (qk_q8.hpp), so the same bound holds. A cache's key pages interleave their rows by pairs of
// bytes, so one 32-byte load holds two bytes of each of 16 keys: widened to int16, a mask and a
// shift give each int32 lane one key's two low nibbles (features 2j, 2j + 1 of a group) and two
// high ones (2j + 16, 2j + 17), multiplied by a broadcast pair of query codes and added in the
// lanes (vpdpwssd where AVX512-VNNI has it), from q4_0's offset, -8 times the group's query codes.
// Each group's sum is then converted and scaled by the 16 keys' scales (one load): per 16 keys and
// 32 features, four loads and widenings for the keys and, per query row, 16 integer products, a
// conversion and an FMA, with no sums across lanes.
#include "../cache/formats/q4.hpp"
#include "../simd/int16_pairs.hpp"
#include "pair_blocks.hpp"
#include "qk_q8.hpp"
#include "scaled_row.hpp"

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

/// A row of a cache's q4 value page (rows one after the other, one scale per 32 features).
using q4_row = scaled_row<cache_format<q4>>;
/// A row of a cache's q4 page: keys interleaved by pairs of bytes, values alone (as q4_row).
using q4_pair_row = packed_pair_row<cache_format<q4>>;

/// Whether this build multiplies q4 keys on int16 products: AVX-512BW or AVX2 batches of float.
inline constexpr bool has_q4_products = has_q8_products;

/// Whether qk_direct_q4 takes `rows` queries of n features (else the caller's float path runs).
constexpr bool q4_products_take(std::size_t rows, std::size_t n) noexcept {
  return has_q4_products && n % cache_format<q4>::group == 0 && rows * n <= detail::q16_stack;
}

namespace detail {

/// Per group of 32 query codes, q4_0's offset: -8 times their sum (a code's value is code - 8).
inline void q4_query_offsets(const std::int16_t* q, std::size_t n, std::int32_t* offset) noexcept {
  constexpr std::size_t group = cache_format<q4>::group;
  for (std::size_t g = 0; g < n / group; ++g) {
    std::int32_t sum = 0;
    for (std::size_t d = 0; d < group; ++d) sum += q[g * group + d];
    offset[g] = -8 * sum;
  }
}

/// One score: qs · the groups' sums (from the offset, exact in int32), each converted and times
/// its key scale in float, added group after group. qk_q4_pairs computes exactly this in its
/// lanes, so a key's score has the same bits whichever path reads its page.
inline float q4_key_score(const std::int16_t* q, const std::int32_t* offset, float qs, const q4_pair_row& k,
                          std::size_t n) noexcept {
  constexpr std::size_t group = cache_format<q4>::group;
  float f = 0.0f;
  for (std::size_t g = 0; g < n / group; ++g) {
    std::int32_t sum = offset[g];  // integers: exact in any order
    for (std::size_t d = 0; d < group; ++d) {
      const std::size_t i = k.col + g * group + d;
      sum += std::int32_t(q[g * group + d]) * std::int32_t((k.q[k.code_at(i)].bits >> (d / 16 * 4)) & 15u);
    }
    f = std::fma(float(sum), *k.scale_at(k.col + g * group), f);
  }
  return f * qs;
}

/// s[r, t] = q4_key_score of R query rows (codes ldq apart, offsets ldo apart, scales qs[r]) and
/// the pair block from k0 (in_pair_block), n a multiple of 32; the first `kept` keys written.
template <std::size_t R, class B = simd::batch<float>>  // B a parameter: int16_pairs exists only where it is used
inline void qk_q4_pairs(const std::int16_t* q, std::size_t ldq, const std::int32_t* offset, std::size_t ldo,
                        const float* qs, const q4_pair_row& k0, std::size_t n, float* s, std::size_t lds,
                        std::size_t kept) {
  using L = simd::int16_pairs<sizeof(B)>;
  using I = typename L::type;
  constexpr std::size_t group = cache_format<q4>::group, pairs = group / 4;  // byte pairs per group
  constexpr std::size_t halves = sizeof(B) == 64 ? 1 : 2;                    // AVX2: 8 keys per vector
  constexpr std::size_t lanes = pair_block / halves;
#if defined(__AVX512VNNI__)
  constexpr std::size_t steps = halves == 1 && R == 1 ? 2 : 1;  // byte pairs in flight: vpdpwssd's latency
#else
  constexpr std::size_t steps = 1;
#endif
  constexpr std::size_t chains = 2 * steps;  // low and high nibbles apart
  const auto* codes = reinterpret_cast<const std::uint8_t*>(k0.q + k0.code_at(k0.col));
  const float* scales = k0.scale_at(k0.col);
  const std::size_t ps = 2 * k0.page_rows, ss = k0.page_rows;
  B f[R][halves];
  each(upto<R * halves>, [&](auto i) { f[i / halves][i % halves] = B(0.0f); });
  for (std::size_t g = 0; g < n / group; ++g) {
    I acc[R][halves][chains];
    each(upto<R * halves * chains>, [&](auto i) {
      constexpr std::size_t r = decltype(i)::value / (halves * chains);
      acc[r][i / chains % halves][i % chains] = i % chains == 0 ? L::set(offset[r * ldo + g]) : L::zero();
    });
    for (std::size_t p = 0; p < pairs; p += steps)
      each(upto<steps>, [&](auto u) {
        const std::size_t j = 2 * (p + u);  // the pair's first byte in its group: features j, j + 1, j + 16, j + 17
        each(upto<halves>, [&](auto h) {
          I lo, hi;
          L::nibbles(codes + (g * pairs + p + u) * ps + h * 2 * lanes, lo, hi);
          each(upto<R>, [&](auto r) {
            std::int32_t ql, qh;
            std::memcpy(&ql, q + r * ldq + g * group + j, sizeof ql);
            std::memcpy(&qh, q + r * ldq + g * group + j + 16, sizeof qh);
            acc[r][h][2 * u] = L::products(acc[r][h][2 * u], lo, ql);
            acc[r][h][2 * u + 1] = L::products(acc[r][h][2 * u + 1], hi, qh);
          });
        });
      });
    add_group_sums<L>(acc, scales + g * ss, f);
  }
  store_pair_scores(f, qs, s, lds, kept);
}

}  // namespace detail

/// qk_direct for q4 key rows (all starting at the same column) on int16 query codes, by blocks of
/// 16 keys (pair_blocks). Returns false, having written nothing, where it does not apply: a build
/// without the products, n not whole groups, more query features than its stack holds, keys not
/// starting a group, or a query that is not finite.
template <class RowFn>
bool qk_direct_q4(const float* q, std::size_t ldq, std::size_t rows, RowFn row, std::size_t cols, std::size_t n,
                  float* s, std::size_t lds, row_prefetch also = {}) {
  if constexpr (!has_q4_products || !std::is_same_v<decltype(row(0)), q4_pair_row>) {
    return false;
  } else {
    constexpr std::size_t group = cache_format<q4>::group;
    if (!q4_products_take(rows, n) || cols == 0 || row(0).col % group != 0) return false;
    alignas(64) std::int16_t codes[detail::q16_stack];
    std::int32_t offsets[detail::q16_stack / group];
    float scales[detail::q16_stack / group];
    for (std::size_t r = 0; r < rows; ++r) {
      scales[r] = detail::quantize_query16(q + r * ldq, n, codes + r * n);
      if (std::isnan(scales[r])) return false;
      detail::q4_query_offsets(codes + r * n, n, offsets + r * (n / group));
    }
    trace::note(op_on<q4_pair_row>(operation::qk_direct));
    detail::pair_blocks(
        rows, row, cols, n, s, lds, also,
        [&](auto R, std::size_t r, const q4_pair_row& k0, float* sb, std::size_t kept) {
          detail::qk_q4_pairs<decltype(R)::value>(codes + r * n, n, offsets + r * (n / group), n / group, scales + r,
                                                  k0, n, sb, lds, kept);
        },
        [&](const q4_pair_row& k, float* sk) {
          for (std::size_t r = 0; r < rows; ++r)
            sk[r * lds] = detail::q4_key_score(codes + r * n, offsets + r * (n / group), scales[r], k, n);
        });
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
