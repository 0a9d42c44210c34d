#pragma once
// O += P·V for the few rows of a decoding step over int8 (q8_0) value rows, on integer products.
// Dequantizing a value row costs three operations per batch of features before its R fused
// multiply-adds; here, per piece of 16 keys, each row's weights p[r, j] · scale[j, g] are rounded
// to int16 codes against a bound of the piece's largest, two keys' codes are interleaved as int16
// pairs, and each instruction adds 32 products exactly in int32 (vpdpwssd where AVX512-VNNI has
// it), converted to float once per piece. Rounding moves a weight by at most 1/65534 of that
// bound, where q8_0 moves a value by up to 1/254 of its group's largest.
#include "../simd/int16_pairs.hpp"
#include "blocking.hpp"
#include "q8_row.hpp"
#include "row_walk.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

namespace detail {

/// Keys per piece (whose weights share a scale per row) and output columns per pass of pv_q8_rows.
inline constexpr std::size_t q8_piece = 16, q8_cols = 256;

/// The feature (from its unit's first) of lane i of a unit's pair batch lo (hi = false) or hi, as
/// int16_pairs::interleave leaves them.
constexpr std::size_t interleaved_feature(std::size_t i, bool hi) noexcept { return 8 * (i / 4) + 4 * hi + i % 4; }

/// The int16 pair lanes of a float batch, named through R so that a build without them (SSE2)
/// never looks inside.
template <std::size_t R>
using q8_lanes = simd::int16_pairs<sizeof(simd::batch<float>) + 0 * R>;

/// One piece's weights: row r's for group g as int16 pairs of keys (2i, 2i + 1) in w[r][g][i], and
/// the float step each code stands for: the largest |p[r, j] · scale[j, g]| of the piece over 32767,
/// so that keys of weight 0 (masked, past a sequence's end) change nothing, whatever their scales.
/// False when a weight is not finite (an inf or NaN in p or a scale: the float path's to handle), or
/// so small that its codes' scale overflows.
template <std::size_t R>
struct q8_weights {
  static constexpr std::size_t groups = q8_cols / q8_row::group;
  alignas(64) std::int32_t w[R][groups][q8_piece / 2];
  float step[R];

  bool set(const float* p, std::size_t ldp, std::size_t kk, const float (&sc)[groups][q8_piece],
           std::size_t ngroups) noexcept {
    using B = simd::batch<float>;
    constexpr std::size_t lanes = simd::width<float>, per = q8_piece / lanes;
    using I = q8_lanes<R>;
    for (std::size_t r = 0; r < R; ++r) {
      alignas(64) float pad[q8_piece];  // a short piece's weights, zeros after its keys
      const float* pr = p + r * ldp;
      if (kk < q8_piece) {
        std::fill(std::copy_n(pr, kk, pad), pad + q8_piece, 0.0f);
        pr = pad;
      }
      B m(0.0f), nonfinite(0.0f);  // x · 0 is 0 for finite x, NaN for inf and NaN
      for (std::size_t g = 0; g < ngroups; ++g)
        for (std::size_t t = 0; t < per; ++t) {
          const B x = B::load_unaligned(pr + t * lanes) * B::load_aligned(sc[g] + t * lanes);
          m = xsimd::max(m, xsimd::abs(x));
          nonfinite += x * B(0.0f);
        }
      // a bound so small that 32767 / bound overflows (weights near float's smallest) is declined too
      const float bound = simd::hmax(m), to_code = bound > 0 ? 32767.0f / bound : 0.0f;
      if (xsimd::any(xsimd::isnan(nonfinite)) || !(bound <= std::numeric_limits<float>::max()) ||
          !(to_code <= std::numeric_limits<float>::max()))
        return false;
      const B inv(to_code);
      step[r] = bound / 32767.0f;
      auto* codes = reinterpret_cast<std::int16_t*>(w[r][0]);
      for (std::size_t g = 0; g < ngroups; ++g)
        for (std::size_t t = 0; t < q8_piece; t += lanes)
          I::store_rounded(B::load_unaligned(pr + t) * B::load_aligned(sc[g] + t) * inv, codes + g * q8_piece + t);
    }
    return true;
  }
};

/// part[r, cb + n · L + i] += the sums of pair batch n of the column block from feature cb (NB
/// pair batches, NB / 2 units of 2L features) over the piece's pairs of keys, times step[r].
template <std::size_t R, std::size_t NB>
[[gnu::always_inline]] inline void q8_block(const std::int8_t* const (&codes)[q8_piece], std::size_t pairs,
                                            const q8_weights<R>& wt, std::size_t cb, float* part,
                                            std::size_t ldpart) noexcept {
  using B = simd::batch<float>;
  using I = q8_lanes<R>;
  constexpr std::size_t L = simd::width<float>, unit = 2 * L;
  typename I::type acc[R][NB];
  each(
      upto<R * NB>, [&](std::size_t n) __attribute__((always_inline)) { acc[n / NB][n % NB] = I::zero(); });
  for (std::size_t i = 0; i < pairs; ++i) {
    const std::int8_t* a = codes[2 * i] + cb;
    const std::int8_t* b = codes[2 * i + 1] + cb;
    each(
        upto<NB / 2>, [&](std::size_t u) __attribute__((always_inline)) {
          typename I::type lo, hi;
          I::interleave(I::widen(a + u * unit), I::widen(b + u * unit), lo, hi);
          const std::size_t g = (cb + u * unit) / q8_row::group;
          each(
              upto<R>, [&](std::size_t r) __attribute__((always_inline)) {
                const std::int32_t pair = wt.w[r][g][i];
                acc[r][2 * u] = I::products(acc[r][2 * u], lo, pair);
                acc[r][2 * u + 1] = I::products(acc[r][2 * u + 1], hi, pair);
              });
        });
  }
  each(
      upto<R * NB>, [&](std::size_t n) __attribute__((always_inline)) {
        const std::size_t r = n / NB;
        float* out = part + r * ldpart + cb + n % NB * L;
        if (wt.step[r] != 0.0f)  // a row of zero weights adds nothing, not even +0 to a -0
          simd::store(out, B(I::fmadd(I::to_float(acc[r][n % NB]), B(wt.step[r]), simd::load(out))));
      });
}

/// q8_block over the columns [cb, dv): blocks of NB pair batches, then of NB / 2, ..., 2.
template <std::size_t R, std::size_t NB>
[[gnu::always_inline]] inline void q8_blocks(const std::int8_t* const (&codes)[q8_piece], std::size_t pairs,
                                             const q8_weights<R>& wt, std::size_t cb, std::size_t dv, float* part,
                                             std::size_t ldpart) noexcept {
  constexpr std::size_t L = simd::width<float>;
  for (; cb + NB * L <= dv; cb += NB * L) q8_block<R, NB>(codes, pairs, wt, cb, part, ldpart);
  if constexpr (NB > 2) q8_blocks<R, NB / 2>(codes, pairs, wt, cb, dv, part, ldpart);
}

}  // namespace detail

/// Whether pv_q8_rows runs here: a build with integer products.
inline constexpr bool has_q8_pv = has_q8_products;

/// o[r, :dv] += sum_j p[r, j] · v[j, :dv] for R <= 4 rows (ldp, ldo apart) over `keys` int8 value
/// rows v(j) (q8_row handles, each starting on a group), on integer products; false, writing
/// nothing, where it cannot: dv not whole groups of 32 or over 256, or an inf or NaN in p or a
/// scale (the float path's, which gets them right). Keys with p[r, j] == 0 add nothing.
template <std::size_t R, class Rows>
inline bool pv_q8_rows(const float* p, std::size_t ldp, const Rows& v, std::size_t keys, float* o, std::size_t ldo,
                       std::size_t dv) {
  static_assert(R >= 1 && R <= 4, "pv_q8_rows: 1 to 4 rows");
  if constexpr (!has_q8_pv) {
    return false;
  } else {
    using detail::q8_cols, detail::q8_piece;
    constexpr std::size_t L = simd::width<float>, unit = 2 * L, G = q8_cols / q8_row::group;
    // pair batches per column block: R · NB int32 accumulators in half the register file
    constexpr std::size_t regs = sizeof(simd::batch<float>) == 64 ? 16 : 8,
                          NB = std::max<std::size_t>(2, regs / R / 2 * 2);
    if (keys == 0 || dv % q8_row::group != 0 || dv > q8_cols || v(0).col % q8_row::group != 0) return false;
    const std::size_t ngroups = dv / q8_row::group;
    alignas(64) float part[R * q8_cols] = {};  // the sums, added to o once all are known
    // a piece's scales and codes are gathered while the piece before it is summed: loaded as vectors
    // right after their scalar stores, they would wait for each store (no store forwarding)
    alignas(64) float sc[2][G][q8_piece];
    const std::int8_t* codes[2][q8_piece];
    const auto gather = [&](std::size_t j0, float(&s)[G][q8_piece], const std::int8_t*(&c)[q8_piece]) {
      const std::size_t kk = std::min(q8_piece, keys - j0);
      if (kk < q8_piece)
        for (std::size_t g = 0; g < ngroups; ++g) std::fill(s[g] + kk, s[g] + q8_piece, 0.0f);
      for_each_row(v, j0, j0 + kk, [&](std::size_t j, const q8_row& row) {
        c[j - j0] = row.q + row.col;
        for (std::size_t g = 0; g < ngroups; ++g) s[g][j - j0] = row.scale[row.col / q8_row::group + g];
      });
      if (kk % 2) c[kk] = c[kk - 1];  // its weight is 0
    };
    detail::q8_weights<R> wt;
    gather(0, sc[0], codes[0]);
    for (std::size_t j0 = 0, k = 0; j0 < keys; j0 += q8_piece, k ^= 1) {
      const std::size_t kk = std::min(q8_piece, keys - j0);
      if (!wt.set(p + j0, ldp, kk, sc[k], ngroups)) return false;
      if (j0 + q8_piece < keys) gather(j0 + q8_piece, sc[k ^ 1], codes[k ^ 1]);
      if (j0 + 3 * q8_piece <= keys)  // values stream from memory: ask for the piece after next
        for_each_row(v, j0 + 2 * q8_piece, j0 + 3 * q8_piece,
                     [&](std::size_t, const q8_row& row) { prefetch_row<1>(row, dv); });
      detail::q8_blocks<R, NB>(codes[k], (kk + 1) / 2, wt, 0, dv, part, q8_cols);
    }
    for (std::size_t r = 0; r < R; ++r)  // lanes back in feature order
      for (std::size_t u = 0; u < dv; u += unit)
        for (std::size_t i = 0; i < L; ++i) {
          o[r * ldo + u + detail::interleaved_feature(i, false)] += part[r * q8_cols + u + i];
          o[r * ldo + u + detail::interleaved_feature(i, true)] += part[r * q8_cols + u + L + i];
        }
    return true;
  }
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
