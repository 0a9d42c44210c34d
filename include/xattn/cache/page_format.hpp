#pragma once
// How one token's row of one head is stored in a page, for any cache format (cache/formats.hpp):
// plain rows as they are (converted on write), a quantized format's codes and then its scales (or,
// for a format quantized per channel, the page's parameters).
#include "formats.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace xattn {

/// One page's rows of one head: codes at rows, a quantized format's scales at scales (else
/// null), placed as `layout` says.
template <class T>
struct page_rows {
  const T* rows = nullptr;
  const float* scales = nullptr;
  row_layout layout;

  /// Row r's feature d as stored (a quantized format's code), and row r's scale g.
  T code(std::size_t r, std::size_t d) const noexcept { return rows[layout.code(r, d)]; }
  float scale(std::size_t r, std::size_t g) const noexcept { return scales[layout.scale(r, g)]; }
  /// Feature d of row r, dequantized.
  float at(std::size_t r, std::size_t d) const noexcept {
    if constexpr (per_channel_v<T>)
      return cache_format<T>::value_at(rows + r * layout.row_step, d, scales);
    else if constexpr (features_per_code<cache_format<T>> != 1)  // packed codes: the one holding d
      return cache_format<T>::feature_value(rows[layout.code(r, cache_format<T>::code_index(d))], d,
                                            scale(r, d / cache_format<T>::group));
    else if constexpr (is_quantized_v<T>)
      return cache_format<T>::value(code(r, d), scale(r, d / cache_format<T>::group));
    else
      return float(code(r, d));
  }
};

/// The bytes of one head's part of a page, and writing a row into it.
template <class T>
struct page_format {
  static_assert(is_cache_element_v<T>, "xattn: page elements are the formats of cache/formats.hpp");
  using format = cache_format<T>;
  static constexpr bool quantized = format::quantized;
  static constexpr bool per_channel = per_channel_v<T>;

  std::size_t dim = 0, page_size = 0;
  bool keys = false;  // a format may lay keys out its own way (int8, q4: by pairs of codes)

  bool interleaved() const noexcept {
    if constexpr (requires { format::interleaves_keys; })
      return keys && format::interleaves_keys;
    else
      return false;
  }
  std::size_t groups() const noexcept {
    if constexpr (quantized)
      return (dim + format::group - 1) / format::group;
    else
      return 0;
  }
  static constexpr std::size_t packs = features_per_code<format>;
  /// Codes of one row: a feature each, or a packing format's whole groups.
  std::size_t row_codes() const noexcept {
    if constexpr (packs != 1) return groups() * (format::group / packs);
    return interleaved() ? (dim + 1) / 2 * 2 : dim;
  }
  row_layout layout() const noexcept {
    if (interleaved()) return {2, 2 * page_size, 1, page_size};
    if constexpr (per_channel) return {row_codes(), 2, 0, 1};  // every row reads the page's parameters
    return {row_codes(), 2, groups(), 1};
  }
  /// Bytes of one head's rows in a page, then of its scales, each rounded up to 64 (every head's
  /// rows and scales start on a cache line, so the scales are aligned floats).
  std::size_t rows_bytes() const noexcept { return (page_size * row_codes() * sizeof(T) + 63) / 64 * 64; }
  std::size_t head_bytes() const noexcept {
    if constexpr (per_channel) return rows_bytes() + (format::parameters(dim) * sizeof(float) + 63) / 64 * 64;
    return rows_bytes() + (page_size * groups() * sizeof(float) + 63) / 64 * 64;
  }
  page_rows<T> view(const std::byte* head) const noexcept {
    const T* rows = reinterpret_cast<const T*>(head);
    const float* scales = quantized ? reinterpret_cast<const float*>(head + rows_bytes()) : nullptr;
    return {rows, scales, layout()};
  }
  /// Row dr of the head at dst := row sr of the head at src, as stored (codes and scales). Not for
  /// a format quantized per channel, whose codes mean nothing under another page's parameters.
  void copy_row(std::byte* dst, std::size_t dr, const std::byte* src, std::size_t sr) const noexcept
      requires(!per_channel) {
    const row_layout at = layout();
    T* to = reinterpret_cast<T*>(dst);
    const T* from = reinterpret_cast<const T*>(src);
    if (interleaved()) {
      for (std::size_t d = 0; d < row_codes(); ++d) to[at.code(dr, d)] = from[at.code(sr, d)];
    } else {
      std::memcpy(to + at.code(dr, 0), from + at.code(sr, 0), row_codes() * sizeof(T));
    }
    if constexpr (quantized) {
      float* scale = reinterpret_cast<float*>(dst + rows_bytes());
      const float* given = reinterpret_cast<const float*>(src + rows_bytes());
      for (std::size_t g = 0; g < groups(); ++g) scale[at.scale(dr, g)] = given[at.scale(sr, g)];
    }
  }
  /// Rows [0, n) of the head at `head` := x (n rows of dim floats, one after the other), quantized
  /// together (a format quantized per channel; the page's rows past n are not read).
  void write_page(std::byte* head, const float* x, std::size_t n) const noexcept requires per_channel {
    format::quantize_page(x, n, dim, reinterpret_cast<T*>(head), row_codes(),
                          reinterpret_cast<float*>(head + rows_bytes()));
  }
  /// Row r of the head at `head` := x (dim values `xs` apart, any element type).
  template <class X>
  void write(std::byte* head, std::size_t r, const X* x, std::ptrdiff_t xs) const noexcept requires(!per_channel) {
    T* out = reinterpret_cast<T*>(head);
    const row_layout at = layout();
    if constexpr (quantized) {
      float* scale = reinterpret_cast<float*>(head + rows_bytes());
      T codes[format::group];
      for (std::size_t g = 0; g * format::group < dim; ++g) {
        const std::size_t lo = g * format::group, hi = std::min(dim, lo + format::group);
        scale[at.scale(r, g)] = format::quantize(x + std::ptrdiff_t(lo) * xs, xs, hi - lo, codes);
        if constexpr (packs != 1) {
          constexpr std::size_t n = format::group / packs;  // a whole group's codes
          if (!interleaved())
            std::copy(codes, codes + n, out + r * at.row_step + g * n);
          else
            for (std::size_t c = 0; c < n; ++c) out[at.code(r, g * n + c)] = codes[c];
        } else if (!interleaved()) {
          std::copy(codes, codes + (hi - lo), out + at.code(r, lo));
        } else {
          for (std::size_t d = lo; d < hi; ++d) out[at.code(r, d)] = codes[d - lo];
          if (hi % 2 != 0) out[at.code(r, hi)] = T{};  // an odd head size's last pair: a zero feature
        }
      }
    } else {
      using wide = std::conditional_t<std::is_same_v<X, double>, double, float>;  // one rounding, to T
      T* row = out + at.code(r, 0);  // rows of these types stand one after the other
      for (std::size_t d = 0; d < dim; ++d) row[d] = T(wide(x[std::ptrdiff_t(d) * xs]));
    }
  }
};

}  // namespace xattn
