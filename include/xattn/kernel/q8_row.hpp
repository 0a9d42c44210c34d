#pragma once
// An int8 row quantized as llama.cpp's q8_0 (one float scale per 32 features), read by the same
// kernels as rows of floats: a row handle with the operations they use on row pointers (+ d, [d]),
// and simd::load_as, which dequantizes a batch in registers.
#include "../simd/compat.hpp"
#include "row_handle.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace xattn::kernel {

struct q8_row {
  static constexpr std::size_t group = 32;  // features per scale
  const std::int8_t* q = nullptr;           // the row's first feature
  const float* scale = nullptr;             // the row's first scale
  std::size_t col = 0;                      // the feature this handle starts at

  using element = std::int8_t;
  static constexpr std::string_view format = "q8_0";

  float operator[](std::ptrdiff_t d) const noexcept {
    const std::size_t i = col + std::size_t(d);
    return float(q[i]) * scale[i / group];
  }
  q8_row operator+(std::size_t d) const noexcept { return {q, scale, col + d}; }
  /// One batch of T from the first feature, dequantized (simd::load_as).
  template <class T>
  simd::batch<T> load() const noexcept;
  /// Asks for the cache lines of `bytes` of codes and of their scales, which lie apart from them
  /// (the hardware prefetcher, following the codes, misses them).
  template <int Locality>
  [[gnu::always_inline]] void prefetch(std::size_t bytes) const noexcept;
};

/// A row of a cache's int8 page. Key pages interleave their page_rows rows by pairs of features:
/// features 2i and 2i + 1 at q[2i · page_rows] and the byte after it, group g's scale at
/// scale[g · page_rows] (row_layout in cache/page_format.hpp), so that one 32-byte load holds a
/// pair of features of 16 keys, which the integer score product multiplies in the lanes of a
/// register (qk_q8.hpp). Value pages store rows one after the other: page_rows 1, a q8_row.
struct q8_pair_row {
  const std::int8_t* q = nullptr;  // the row's first code
  const float* scale = nullptr;    // the row's first scale
  std::size_t col = 0;
  std::size_t page_rows = 1;
  bool scattered = false;  // a selection's row (select(K, idx)): the rows beside it are not its neighbours
  using element = std::int8_t;
  static constexpr std::string_view format = "q8_0";
  static constexpr std::size_t features_per_pair = 2;

  bool alone() const noexcept { return page_rows == 1; }
  q8_row as_row() const noexcept { return {q, scale, col}; }  // for alone() rows
  std::size_t code_at(std::size_t i) const noexcept { return i / 2 * 2 * page_rows + i % 2; }
  const float* scale_at(std::size_t i) const noexcept { return scale + i / q8_row::group * page_rows; }
  float operator[](std::ptrdiff_t d) const noexcept {
    const std::size_t i = col + std::size_t(d);
    return float(q[code_at(i)]) * *scale_at(i);
  }
  q8_pair_row operator+(std::size_t d) const noexcept { return {q, scale, col + d, page_rows, scattered}; }
  /// The same feature of the row `codes` codes and `scales` scales further in its page.
  q8_pair_row step(std::size_t codes, std::size_t scales) const noexcept {
    return {q + codes, scale + scales, col, page_rows};
  }
  template <class T>
  simd::batch<T> load() const noexcept;
  /// Rows interleaved by pairs are not asked for one by one: the score product that reads them
  /// prefetches whole blocks of rows. Rows alone as q8_row's.
  template <int Locality>
  [[gnu::always_inline]] void prefetch(std::size_t bytes) const noexcept {
    if (alone()) as_row().prefetch<Locality>(bytes);
  }
};

template <int Locality>
[[gnu::always_inline]] inline void q8_row::prefetch(std::size_t bytes) const noexcept {
  prefetch_row<Locality>(q + col, bytes);
  prefetch_row<Locality>(scale + col / group, (bytes + group - 1) / group * sizeof(float));
}

/// Whether this build multiplies int8 codes on int16 products (the score product of qk_q8.hpp,
/// P·V of pv_q8.hpp): batches of float AVX-512BW or AVX2.
#if defined(__AVX512BW__)
inline constexpr bool has_q8_products = std::is_base_of_v<xsimd::avx512f, simd::batch<float>::arch_type>;
#elif defined(__AVX2__)
inline constexpr bool has_q8_products = std::is_base_of_v<xsimd::avx2, simd::batch<float>::arch_type>;
#else
inline constexpr bool has_q8_products = false;
#endif

/// Whether batches of T are dequantized from q8_0 codes in registers (float on AVX2 or AVX-512).
template <class T>
inline constexpr bool q8_widens = std::is_same_v<T, float>&& simd::avx2_or_avx512;

/// The float batch of the codes at p, times scale: widened and converted in registers.
template <class T = float>
inline simd::batch<T> q8_batch(const std::int8_t* p, float scale) noexcept {
  using B = simd::batch<T>;
  if constexpr (simd::width<T> == 16)
    return B(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))) * B(scale);
  else
    return B(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))))) * B(scale);
}

}  // namespace xattn::kernel

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

/// One batch of T from a q8_0 row, dequantized: the int8 lanes widened and converted in registers
/// and multiplied by their group's scale (a batch starting on a multiple of its width never
/// straddles two groups of 32).
template <class T>
inline simd::batch<T> q8_row::load() const noexcept {
  constexpr std::size_t w = simd::width<T>;
  if constexpr (q8_widens<T>)
    if (col % w == 0) return q8_batch<T>(q + col, scale[col / group]);
  alignas(64) std::array<T, w> lanes;
  for (std::size_t i = 0; i < w; ++i) lanes[i] = T((*this)[std::ptrdiff_t(i)]);
  return simd::batch<T>::load_aligned(lanes.data());
}

/// One batch of T from a row of a cache page, dequantized: interleaved rows lane by lane (prefill
/// packs a key block once for all its query rows; decoding reads them through qk_direct_q8).
template <class T>
inline simd::batch<T> q8_pair_row::load() const noexcept {
  if (alone()) return as_row().load<T>();
  alignas(64) std::array<T, simd::width<T>> lanes;
  for (std::size_t i = 0; i < simd::width<T>; ++i) lanes[i] = T((*this)[std::ptrdiff_t(i)]);
  return simd::batch<T>::load_aligned(lanes.data());
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
