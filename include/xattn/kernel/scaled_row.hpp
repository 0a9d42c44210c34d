#pragma once
// A row of codes with one float scale per group of features, stored one row after the other (a
// cache page's rows of a quantized format), read by the same kernels as rows of floats: a row
// handle with the operations they use on row pointers (+ d, [d]), load<T>() for simd::load_as and
// prefetch<L>() for prefetch_row. The format F says what a code means:
//   F::code, F::group (a multiple of every batch width), F::value(code, scale) -> float,
//   F::widens<T> and F::batch<T>(codes, scale): a batch of T decoded in registers
// (cache/format.hpp; a format packing features in its codes reads them from the row's codes).
#include "../cache/format.hpp"
#include "../simd/compat.hpp"
#include "row_handle.hpp"

#include <array>
#include <cstddef>
#include <string_view>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

template <class F>
struct scaled_row {
  using element = typename F::code;
  static constexpr std::string_view format = F::format;
  const element* q = nullptr;    // the row's first code
  const float* scale = nullptr;  // the row's first scale
  std::size_t col = 0;           // the feature this handle starts at

  static constexpr std::size_t packs = features_per_code<F>;

  float operator[](std::ptrdiff_t d) const noexcept {
    const std::size_t i = col + std::size_t(d);
    return code_value<F>(q, i, scale[i / F::group]);
  }
  scaled_row operator+(std::size_t d) const noexcept { return {q, scale, col + d}; }
  /// The same feature of the row `codes` codes and `scales` scales further in its page.
  scaled_row step(std::size_t codes, std::size_t scales) const noexcept { return {q + codes, scale + scales, col}; }

  /// One batch of T from the first feature, dequantized: in registers when the format decodes
  /// there and the batch starts on a multiple of its width (then it lies in one group).
  template <class T>
  simd::batch<T> load() const noexcept {
    constexpr std::size_t w = simd::width<T>;
    if constexpr (F::template widens<T>)
      if (col % w == 0) {
        if constexpr (packs != 1)
          return F::template batch<T>(q, col, scale[col / F::group]);
        else
          return F::template batch<T>(q + col, scale[col / F::group]);
      }
    alignas(64) std::array<T, w> lanes;
    for (std::size_t i = 0; i < w; ++i) lanes[i] = T((*this)[std::ptrdiff_t(i)]);
    return simd::batch<T>::load_aligned(lanes.data());
  }

  /// CC batches of T from the first feature into out, whole groups decoded at once, where the
  /// format can (F::batches) and the row starts a group; else false, having written nothing.
  template <class T, std::size_t CC>
  [[gnu::always_inline]] bool load_groups(simd::batch<T> (&out)[CC]) const noexcept {
    if constexpr (requires { F::template decodes_groups<T, CC>; }) {
      if constexpr (F::template decodes_groups<T, CC>)
        if (col % F::group == 0) {
          F::template batches<T>(q, col, scale + col / F::group, out);
          return true;
        }
    }
    return false;
  }

  /// The cache lines of the codes of bytes / sizeof(element) features and of their scales, which
  /// lie apart from them.
  template <int Locality>
  [[gnu::always_inline]] void prefetch(std::size_t bytes) const noexcept {  // see prefetch_row
    const std::size_t features = bytes / sizeof(element);
    prefetch_row<Locality>(q + col / packs, (features + packs - 1) / packs * sizeof(element));
    prefetch_row<Locality>(scale + col / F::group, (features + F::group - 1) / F::group * sizeof(float));
  }
};

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
