#pragma once
// A row of a cache page of a format packing features in its codes (q4: two 4-bit codes a byte),
// as int8's q8_pair_row: key pages interleave their page_rows rows by pairs of codes (bytes 2i and
// 2i + 1 of row r at q[2i · page_rows + 2r] and the byte after it, group g's scale at
// scale[g · page_rows]), so that one 32-byte load holds a pair of bytes of 16 keys, which the
// integer score product multiplies in the lanes of a register (qk_q4.hpp). Value pages store rows
// one after the other: page_rows 1, a scaled_row.
#include "../cache/format.hpp"
#include "../simd/compat.hpp"
#include "scaled_row.hpp"

#include <array>
#include <cstddef>
#include <string_view>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

/// F says where a row's feature i lies and what it is: F::code_index(i), the code holding it, and
/// F::feature_value(code, i, scale).
template <class F>
struct packed_pair_row {
  using element = typename F::code;
  static constexpr std::string_view format = F::format;
  static constexpr std::size_t features_per_pair = 2 * features_per_code<F>;
  const element* q = nullptr;    // the row's first code
  const float* scale = nullptr;  // the row's first scale
  std::size_t col = 0;
  std::size_t page_rows = 1;
  bool scattered = false;  // a selection's row (select(K, idx)): the rows beside it are not its neighbours

  bool alone() const noexcept { return page_rows == 1; }
  scaled_row<F> as_row() const noexcept { return {q, scale, col}; }  // for alone() rows
  /// Where feature i's code is, from the row's first code.
  std::size_t code_at(std::size_t i) const noexcept {
    const std::size_t c = F::code_index(i);
    return c / 2 * 2 * page_rows + c % 2;
  }
  const float* scale_at(std::size_t i) const noexcept { return scale + i / F::group * page_rows; }
  float operator[](std::ptrdiff_t d) const noexcept {
    const std::size_t i = col + std::size_t(d);
    return F::feature_value(q[code_at(i)], i, *scale_at(i));
  }
  packed_pair_row operator+(std::size_t d) const noexcept { return {q, scale, col + d, page_rows, scattered}; }
  /// The same feature of the row `codes` codes and `scales` scales further in its page.
  packed_pair_row step(std::size_t codes, std::size_t scales) const noexcept {
    return {q + codes, scale + scales, col, page_rows};
  }
  /// One batch of T from the first feature, dequantized: rows alone as scaled_row's, interleaved
  /// rows lane by lane (decoding reads them through the integer product; prefill packs a key block
  /// once for all its query rows).
  template <class T>
  simd::batch<T> load() const noexcept {
    if (alone()) return as_row().template load<T>();
    alignas(64) std::array<T, simd::width<T>> lanes;
    for (std::size_t i = 0; i < simd::width<T>; ++i) lanes[i] = T((*this)[std::ptrdiff_t(i)]);
    return simd::batch<T>::load_aligned(lanes.data());
  }
  template <class T, std::size_t CC>
  [[gnu::always_inline]] bool load_groups(simd::batch<T> (&out)[CC]) const noexcept {
    return alone() && as_row().template load_groups<T, CC>(out);
  }
  /// Interleaved rows are not asked for one by one: the score product prefetches whole blocks.
  template <int Locality>
  [[gnu::always_inline]] void prefetch(std::size_t bytes) const noexcept {
    if (alone()) as_row().template prefetch<Locality>(bytes);
  }
};

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
