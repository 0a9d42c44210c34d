#pragma once
// A square block of floats transposed in registers: w batches of w lanes (16 with AVX-512, 8 with
// AVX2). Packing keys is a transpose, which element by element would take a noticeable share of a
// short sequence's attention; in registers a few shuffles per w x w block do it.
#include "../simd/compat.hpp"

#include <array>
#include <cstddef>
#include <type_traits>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

/// Whether transpose_square exists for batches of Acc on the architecture compiled for.
template <class Acc>
inline constexpr bool has_transpose_square = std::is_same_v<Acc, float>&& simd::avx2_or_avx512 &&
                                             (simd::width<Acc> == 8 || simd::width<Acc> == 16);

namespace detail {

template <class B>  // templates, so that only the ISA compiled for is instantiated
inline void transpose16(std::array<B, 16>& r) noexcept {
  __m512 t[16];
  for (std::size_t i = 0; i < 16; i += 2) {  // pairs of rows interleaved by element
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  const auto lo = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  const auto hi = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  __m512 u[16];
  for (std::size_t i = 0; i < 16; i += 4) {  // then by pairs: each 128-bit lane holds a 4 x 4 block
    u[i] = lo(t[i], t[i + 2]);
    u[i + 1] = hi(t[i], t[i + 2]);
    u[i + 2] = lo(t[i + 1], t[i + 3]);
    u[i + 3] = hi(t[i + 1], t[i + 3]);
  }
  for (std::size_t k = 0; k < 4; ++k) {  // then the 4 x 4 blocks themselves, by 128-bit lanes
    const __m512 a0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88), a1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xdd);
    const __m512 b0 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88),
                 b1 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xdd);
    r[k] = _mm512_shuffle_f32x4(a0, b0, 0x88);
    r[k + 4] = _mm512_shuffle_f32x4(a1, b1, 0x88);
    r[k + 8] = _mm512_shuffle_f32x4(a0, b0, 0xdd);
    r[k + 12] = _mm512_shuffle_f32x4(a1, b1, 0xdd);
  }
}

template <class B>
inline void transpose8(std::array<B, 8>& r) noexcept {
  __m256 t[8], u[8];
  for (std::size_t i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (std::size_t i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (std::size_t k = 0; k < 4; ++k) {  // 128-bit halves: rows 0-3 in the low, 4-7 in the high
    r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}

}  // namespace detail

/// r[i][j] <- r[j][i].
template <class Acc>
inline void transpose_square(std::array<simd::batch<Acc>, simd::width<Acc>>& r) noexcept {
  static_assert(has_transpose_square<Acc>, "xattn: transpose_square needs float batches of 8 or 16 lanes");
  if constexpr (simd::width<Acc> == 16)
    detail::transpose16(r);
  else
    detail::transpose8(r);
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
