#pragma once
// The bf16_pairs format: bfloat16 products by AVX512-BF16's vdpbf16ps, which multiplies two pairs
// of bf16 and adds both products to an fp32 lane, twice the FLOPs of an fp32 FMA per instruction.
// Its operands come in pairs along the summed axis, a pair_tile, and each operation of qk.hpp,
// pv.hpp and pack.hpp has an overload here for them:
//  - S = Q·Kᵀ: keys in strips like pack_kt's, but a strip row holds the feature pair (2p, 2p + 1)
//    of each key side by side (pack_kt into a pair_tile); a query row's pair is one 32-bit
//    broadcast (qk_tile on a pair_tile; qk_direct on bf16 queries and key rows as they lie);
//  - O += P·V: P rounded to bf16 row by row (adjacent keys make a pair), V in key pairs: row t holds
//    (v[2t, d], v[2t + 1, d]) for each feature d (pack_strips into a pair_tile; pv_tile_strips).
// Products of bf16 are exact in fp32 and sum in fp32, so the one rounding beyond fp32's is P's
// (as in PyTorch's and oneDNN's bf16 attention). vdpbf16ps treats subnormal inputs and results as
// zero. Everything here is a template, instantiated only when has_dpbf16 holds.
#include "../bfloat16.hpp"
#include "../round_up.hpp"
#include "pv.hpp"
#include "qk.hpp"
#include "trace.hpp"
#include "transpose.hpp"

#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

/// Whether this build has vdpbf16ps: -march with AVX512-BF16 (znver4, sapphirerapids, native on
/// such a CPU), chosen at compile time like xsimd's architecture.
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
inline constexpr bool has_dpbf16 = true;
#else
inline constexpr bool has_dpbf16 = false;
#endif

/// bfloat16 elements in pairs along the summed axis, at data: the type of the format's tiles, so
/// that the products and packs on them are overloads of the same operations.
template <class T = const bfloat16>
struct pair_tile {
  static constexpr std::string_view format = "bf16_pairs";
  T* data = nullptr;

  constexpr pair_tile() = default;
  constexpr explicit pair_tile(T* p) noexcept : data(p) {}
  template <class U>
  requires std::is_convertible_v<U*, T*>
  constexpr pair_tile(pair_tile<U> t) noexcept : data(t.data) {}
};

/// p as a pair tile.
template <class T>
constexpr pair_tile<T> in_pairs(T* p) noexcept {
  return pair_tile<T>(p);
}

/// The format's name in tile operations (explain, the trace).
inline constexpr std::string_view bf16_pairs = pair_tile<>::format;

/// Keys per strip of a pair panel: four registers of 16 fp32 lanes, the score microkernel's width.
inline constexpr std::size_t pair_strip = 64;

/// bf16 elements of a pair panel of cols keys with n features (whole strips, n rounded up to even).
constexpr std::size_t packed_pairs_size(std::size_t cols, std::size_t n) noexcept {
  return round_up(cols, pair_strip) * round_up(n, 2);
}

/// Where key c's feature d lies in a pair panel of keys with n features, in elements from its
/// start: strip c / pair_strip (pair_strip · (n + n%2) elements), row d / 2 of the strip (the
/// feature pair, 2 · pair_strip elements), key c % pair_strip of the row (2 elements), d % 2.
constexpr std::size_t pair_panel_offset(std::size_t c, std::size_t d, std::size_t n) noexcept {
  return c / pair_strip * pair_strip * round_up(n, 2) + d / 2 * 2 * pair_strip + c % pair_strip * 2 + d % 2;
}

/// x in bf16: unchanged if it is one, else rounded to nearest even.
template <class S>
inline bfloat16 to_bf16(S x) noexcept {
  if constexpr (std::is_same_v<S, bfloat16>)
    return x;
  else if constexpr (std::is_floating_point_v<S>)
    return bfloat16(x);
  else
    return bfloat16(float(x));
}

namespace detail {

inline std::int32_t pair_bits(const bfloat16* p) noexcept {  // two adjacent bf16 as one 32-bit word
  std::int32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

template <class B = __m512, class I = __m512i>
inline B dpbf16(B acc, I a, I b) noexcept {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

/// 16 fp32 lanes: a type that exists only where AVX-512 does, so it is named through S.
template <class S>
struct lanes16 {
  using type = xsimd::batch<float, xsimd::avx512bw>;
};

}  // namespace detail

/// Packs keys 0..cols-1 (key c's features at row(c)[d * dstride], of any element type, rounded to
/// bf16) into a pair panel of packed_pairs_size(cols, n) elements at out: key c's feature d at
/// out.data + pair_panel_offset(c, d, n), so a strip row holds one feature pair of 64 keys side by
/// side. Keys past cols and the odd feature's partner are zero.
template <class RowFn>
void pack_kt(RowFn row, std::size_t cols, std::size_t n, std::ptrdiff_t dstride, pair_tile<bfloat16> out) {
  trace::note({operation::pack_kt, bf16_pairs});
  bfloat16* kt = out.data;
  using S = std::remove_cv_t<std::remove_pointer_t<decltype(row(0))>>;
  const std::size_t n2 = (n + 1) / 2;
  const auto at = [&](std::size_t c, std::size_t d) { return kt + pair_panel_offset(c, d, n); };
  for (std::size_t c = cols; c % pair_strip != 0; ++c)
    for (std::size_t d = 0; d < 2 * n2; ++d) *at(c, d) = bfloat16::from_bits(0);
  std::size_t c = 0;
  if constexpr (has_dpbf16 && std::is_same_v<S, bfloat16>) {
    // 16 keys x 32 features at a time: a key's 32 features are 16 pairs, 16 32-bit words, so one
    // transpose of 16 x 16 words in registers turns key rows into pair rows
    const std::size_t n32 = dstride == 1 ? n / 32 * 32 : 0;
    std::array<typename detail::lanes16<S>::type, 16> r;
    for (; n32 > 0 && c + 16 <= cols; c += 16) {
      for (std::size_t d0 = 0; d0 < n32; d0 += 32) {
        for (std::size_t i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(reinterpret_cast<const float*>(row(c + i) + d0));
        detail::transpose16(r);
        for (std::size_t p = 0; p < 16; ++p) _mm512_storeu_ps(reinterpret_cast<float*>(at(c, d0 + 2 * p)), r[p]);
      }
      for (std::size_t i = 0; i < 16; ++i)
        for (std::size_t d = n32; d < n; ++d) *at(c + i, d) = row(c + i)[d];
    }
  }
  for (; c < cols; ++c) {
    const auto* r = row(c);
    for (std::size_t d = 0; d < n; ++d) *at(c, d) = to_bf16(r[std::ptrdiff_t(d) * dstride]);
  }
  if (n % 2 != 0)
    for (c = 0; c < cols; ++c) *at(c, n) = bfloat16::from_bits(0);
}

/// Packs the value rows of keys 0..keys-1 (row(j) -> key j's dv features, stride apart, any element
/// type) in key pairs: pair row t at vp = out.data + t·2·dvp holds (v[2t, d], v[2t + 1, d]) at 2d,
/// 2d + 1 for d < dvp; features past dv and the partner of an odd last key are zero. out holds
/// (keys + keys%2)·dvp elements.
template <class RowFn>
void pack_strips(RowFn row, std::size_t keys, std::size_t dv, std::ptrdiff_t stride, pair_tile<bfloat16> out,
                 std::size_t dvp) {
  trace::note({operation::pack_strips, bf16_pairs});
  bfloat16* vp = out.data;
  using S = std::remove_cv_t<std::remove_pointer_t<decltype(row(0))>>;
  for (std::size_t t = 0; 2 * t < keys; ++t) {
    bfloat16* dst = vp + t * 2 * dvp;
    const S* a = row(2 * t);
    const S* b = 2 * t + 1 < keys ? row(2 * t + 1) : nullptr;
    std::size_t d = 0;
    if constexpr (has_dpbf16 && std::is_same_v<S, float>)
      if (stride == 1) {
        // 16 features of both keys rounded by one conversion (a's low, b's high), then interleaved
        const __m512i mix = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                             21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        for (; d + 16 <= dv; d += 16) {
          const __m512 x = _mm512_loadu_ps(a + d), y = b ? _mm512_loadu_ps(b + d) : _mm512_setzero_ps();
          _mm512_storeu_si512(dst + 2 * d, _mm512_permutexvar_epi16(mix, (__m512i)_mm512_cvtne2ps_pbh(y, x)));
        }
      }
    if constexpr (has_dpbf16 && std::is_same_v<S, bfloat16>)
      if (stride == 1) {
        // 32 features of both keys: interleaved by one permute each for the low and high 16
        const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                            37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0),
                      hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
        for (; d + 32 <= dv; d += 32) {
          const __m512i x = _mm512_loadu_si512(a + d), y = b ? _mm512_loadu_si512(b + d) : _mm512_setzero_si512();
          _mm512_storeu_si512(dst + 2 * d, _mm512_permutex2var_epi16(x, lo, y));
          _mm512_storeu_si512(dst + 2 * d + 32, _mm512_permutex2var_epi16(x, hi, y));
        }
      }
    for (; d < dvp; ++d) {
      const std::ptrdiff_t at = std::ptrdiff_t(d) * stride;
      dst[2 * d] = d < dv ? to_bf16(a[at]) : bfloat16::from_bits(0);
      dst[2 * d + 1] = b && d < dv ? to_bf16(b[at]) : bfloat16::from_bits(0);
    }
  }
}

/// out[0..n) = p[0..n) rounded to bf16 (n a multiple of 16), by the round-to-nearest-even
/// conversion of AVX512-BF16 (subnormals become zero).
template <class P = float>
inline void round_row_bf16(const P* p, std::size_t n, bfloat16* out) noexcept {
  std::size_t j = 0;
  for (; j + 32 <= n; j += 32)
    _mm512_storeu_si512(out + j, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + j + 16), _mm512_loadu_ps(p + j)));
  for (; j < n; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(p + j)));
}

/// out[d] = x[d · stride] in bf16 for d < n: bfloat16 rows copied, float rows (contiguous) rounded
/// 16 at a time by AVX512-BF16's conversion (subnormals become zero), anything else one by one.
template <class S>
inline void round_to_bf16(const S* x, std::ptrdiff_t stride, std::size_t n, bfloat16* out) noexcept {
  std::size_t d = 0;
  if (stride == 1) {
    if constexpr (std::is_same_v<S, bfloat16>) {
      std::memcpy(out, x, n * sizeof(bfloat16));
      return;
    } else if constexpr (has_dpbf16 && std::is_same_v<S, float>) {
      for (; d + 16 <= n; d += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + d), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + d)));
    }
  }
  for (; d < n; ++d) out[d] = to_bf16(x[std::ptrdiff_t(d) * stride]);
}

namespace detail {

/// s[r, c] = scale · sum_p q-pair(r, p) · key-pair(c, p) for R rows x C registers of keys, each
/// row's sums through the epilogue (plain_epilogue: stored).
template <std::size_t R, std::size_t C, class Epi>
inline void qk_pairs_micro(const bfloat16* q, std::size_t ldq, const bfloat16* kt, std::size_t n2, float scale,
                           float* s, std::size_t lds, const Epi& epi) {
  using B = typename lanes16<Epi>::type;
  B acc[R][C];
  each(upto<R * C>, [&](auto i) { acc[i / C][i % C] = _mm512_setzero_ps(); });
  for (std::size_t p = 0; p < n2; ++p) {
    __m512i k[C];
    each(upto<C>, [&](auto c) { k[c] = _mm512_loadu_si512(kt + p * 2 * pair_strip + c * 32); });
    each(upto<R>, [&](auto r) {
      const __m512i qv = _mm512_set1_epi32(pair_bits(q + r * ldq + 2 * p));
      each(upto<C>, [&](auto c) { acc[r][c] = dpbf16(__m512(acc[r][c]), qv, k[c]); });
    });
  }
  if (scale != 1.0f) {
    const B sc(scale);
    each(upto<R * C>, [&](auto i) { acc[i / C][i % C] *= sc; });
  }
  each(upto<R>, [&](auto r) { epi(r, acc[r], s + r * lds); });
}

}  // namespace detail

/// s[r, c] = scale · sum_d q[r, d] · key(c)[d] for r < rows, c < cols_padded (a multiple of 16):
/// queries as bf16 rows ldq apart (n rounded up to even, the odd partner zero), keys packed by
/// pack_kt into a pair tile. The scale multiplies the fp32 sums, so the queries need no rounding
/// of their own. The sums go through an epilogue as qk_tile's (plain_epilogue: stored as they are).
template <class Q = bfloat16, class Epi = plain_epilogue>
void qk_tile(const Q* q, std::size_t ldq, std::size_t rows, pair_tile<> keys, std::size_t n, std::size_t cols_padded,
             float scale, float* s, std::size_t lds, const Epi& epi = {}) {
  trace::note({operation::qk_tile, bf16_pairs});
  const bfloat16* kt = keys.data;
  if constexpr (requires { Epi::op; }) trace::note(Epi::op);
  const std::size_t n2 = (n + 1) / 2;
  std::size_t c = 0;
  for (; c + pair_strip <= cols_padded; c += pair_strip)
    detail::by_row_blocks<float>(rows, [&](auto R, std::size_t r) {
      detail::qk_pairs_micro<decltype(R)::value, 4>(q + r * ldq, ldq, kt + pair_panel_offset(c, 0, n), n2, scale,
                                                    s + r * lds + c, lds, epi.at(r, c));
    });
  for (; c < cols_padded; c += 16)  // the last, partial strip: one register at a time
    detail::by_row_blocks<float>(rows, [&](auto R, std::size_t r) {
      detail::qk_pairs_micro<decltype(R)::value, 1>(q + r * ldq, ldq, kt + pair_panel_offset(c, 0, n), n2, scale,
                                                    s + r * lds + c, lds, epi.at(r, c));
    });
}

namespace detail {

/// s[r, t] = scale · q[r, :n] · k[t][:n] for R rows and 4 key rows in place (the first kept
/// written), 32 features (16 pairs) per vdpbf16ps; past n both operands load as zero. Reduced like
/// qk_direct_micro.
template <std::size_t R, class B = batch<float>>
inline void qk_direct_pairs_micro(const bfloat16* q, std::size_t ldq, const bfloat16* const* k, std::size_t n,
                                  float scale, float* s, std::size_t lds, std::size_t kept) {
  B acc[R][4];
  each(upto<R * 4>, [&](auto i) { acc[i / 4][i % 4] = B(0.0f); });
  for (std::size_t d = 0; d < n; d += 32) {
    const __mmask32 m = n - d >= 32 ? ~__mmask32(0) : __mmask32((1u << (n - d)) - 1);
    __m512i kv[4];
    each(upto<4>, [&](auto c) { kv[c] = _mm512_maskz_loadu_epi16(m, k[c] + d); });
    each(upto<R>, [&](auto r) {
      const __m512i qv = _mm512_maskz_loadu_epi16(m, q + r * ldq + d);
      each(upto<4>, [&](auto c) { acc[r][c] = dpbf16(acc[r][c], qv, kv[c]); });
    });
  }
  store_sums<R>(
      acc, scale, false, [](std::size_t, float sum) { return sum; }, s, lds, kept);
}

}  // namespace detail

/// s[r, c] = scale · q[r, :n] · row(c)[:n] for r < rows, c < cols: qk_direct for bf16 queries and
/// bf16 key rows in place, multiplied by vdpbf16ps on the rows as they lie (a key row's 32
/// features are 16 pairs of the summed axis) instead of widened to float: twice the products per
/// instruction, and no conversion. Exact products, fp32 sums, the scale on the sums, as qk_tile
/// on a pair tile.
template <class RowFn>
void qk_direct(const bfloat16* q, std::size_t ldq, std::size_t rows, RowFn row, std::size_t cols, std::size_t n,
               float scale, float* s, std::size_t lds, row_prefetch also = {}) {
  trace::note({operation::qk_direct, bf16_pairs});
  detail::direct_blocks<4>(
      rows, row, cols, n * sizeof(bfloat16), s, lds,
      [&](auto R, std::size_t r, const bfloat16* const* k, float* sb, std::size_t kept) {
        detail::qk_direct_pairs_micro<decltype(R)::value>(q + r * ldq, ldq, k, n, scale, sb, lds, kept);
      },
      also);
}

namespace detail {

/// o[r, c0 + d] += sum_t p-pair(r, t) · v-pair(t, c0 + d) for one register block (p-pair(r, t) at
/// p + r·ldp + t·ldt), the block's sum added to o once; rows whose sum is not finite are left
/// untouched and flagged, as in pv_micro.
template <std::size_t R, std::size_t CC>
inline unsigned pv_pairs_micro(const bfloat16* p, std::size_t ldp, std::size_t ldt, const bfloat16* vp, std::size_t ldv,
                               std::size_t pairs, float* o, std::size_t ldo) {
  __m512 acc[R][CC];
  each(upto<R * CC>, [&](auto i) { acc[i / CC][i % CC] = _mm512_setzero_ps(); });
  for (std::size_t t = 0; t < pairs; ++t) {
    __m512i vv[CC];
    each(upto<CC>, [&](auto c) { vv[c] = _mm512_loadu_si512(vp + t * ldv + c * 32); });
    each(upto<R>, [&](auto r) {
      const __m512i pr = _mm512_set1_epi32(pair_bits(p + r * ldp + t * ldt));
      each(upto<CC>, [&](auto c) { acc[r][c] = dpbf16(acc[r][c], pr, vv[c]); });
    });
  }
  unsigned flagged = 0;
  each(upto<R>, [&](auto r) {
    __m512 probe = _mm512_setzero_ps();  // x - x is 0 for finite x and NaN otherwise
    each(upto<CC>, [&](auto c) { probe = _mm512_add_ps(probe, _mm512_sub_ps(acc[r][c], acc[r][c])); });
    if (_mm512_cmp_ps_mask(probe, probe, _CMP_UNORD_Q) != 0) {
      flagged |= 1u << r;
      return;
    }
    each(upto<CC>, [&](auto c) {
      float* at = o + r * ldo + c * 16;
      _mm512_storeu_ps(at, _mm512_add_ps(_mm512_loadu_ps(at), acc[r][c]));
    });
  });
  return flagged;
}

/// o[:width] += sum over keys j with p32[j] != 0 of p[j] · v[j, :width], from key-pair rows: a
/// flagged row again, where a key of weight 0 (masked, underflowed) must not bring V's inf or NaN
/// in. The weights are the rounded ones of the other rows (or p32's where rounding flushed them);
/// without p32, the rounded ones, keys of rounded weight 0 skipped. Key j's weight is at
/// p + j/2·ldt + j%2.
inline void pv_exact_pairs_row(const bfloat16* p, std::size_t ldt, const float* p32, const bfloat16* vp,
                               std::size_t ldv, std::size_t keys, float* o, std::size_t width) {
  for (std::size_t d = 0; d < width; ++d) {
    float acc = 0;
    for (std::size_t j = 0; j < keys; ++j) {
      const float pj = float(p[j / 2 * ldt + j % 2]);
      const float w = pj != 0.0f || !p32 ? pj : p32[j];
      if (w != 0.0f) acc += w * float(vp[j / 2 * ldv + 2 * d + j % 2]);
    }
    o[d] += acc;
  }
}

}  // namespace detail

/// o[r, :] += sum_j p[r, j] · v[j, :] for r < rows, j < keys: p as bf16 rows ldp apart (rounded by
/// round_row_bf16, zero past keys up to an even count), v packed by pack_strips into a pair tile
/// (ldv = 2·dvp), dvp a multiple of 16. p32 (the same rows unrounded, ldp32 apart) serves rows
/// whose sum is not finite: they are recomputed skipping keys of weight 0, like pv_tile (p32 may
/// be null: the rounded weights decide). ldt: elements between a row's consecutive pairs, 2 for
/// rows as they are; a transposed operand interleaved by pack_strips (pairs of its rows) is read
/// in place with ldp = 2 and ldt its pair rows' distance.
template <class Acc = float>
void pv_tile_strips(pair_tile<> probs, std::size_t ldp, const Acc* p32, std::size_t ldp32, std::size_t rows,
                    pair_tile<> values, std::size_t keys, float* o, std::size_t ldo, std::size_t dvp,
                    std::size_t ldt = 2) {
  trace::note({operation::pv_tile_strips, bf16_pairs});
  const bfloat16 *p = probs.data, *vp = values.data;
  const std::size_t pairs = (keys + 1) / 2, ldv = 2 * dvp;
  detail::by_row_blocks<float>(rows, [&](auto R, std::size_t r) {
    constexpr std::size_t RR = decltype(R)::value;
    detail::by_column_blocks<RR, float>(dvp, [&](auto cvecs, std::size_t c0) {
      constexpr std::size_t CC = decltype(cvecs)::value;
      const unsigned flagged =
          detail::pv_pairs_micro<RR, CC>(p + r * ldp, ldp, ldt, vp + 2 * c0, ldv, pairs, o + r * ldo + c0, ldo);
      for (std::size_t i = 0; flagged != 0 && i < RR; ++i)
        if (flagged & (1u << i))
          detail::pv_exact_pairs_row(p + (r + i) * ldp, ldt, p32 ? p32 + (r + i) * ldp32 : nullptr, vp + 2 * c0, ldv,
                                     keys, o + (r + i) * ldo + c0, CC * 16);
    });
  });
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
