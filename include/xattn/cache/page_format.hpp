#pragma once
// How one token's row of one head is stored in a page, per element type: float, bfloat16 and
// float16 rows as they are (converted on write), int8 rows as llama.cpp's q8_0 stores them: one
// float scale per group of 32 features, each feature round(x · (1 / scale)) with scale = max|x| / 127
// (rounded half away from zero, as q8_0 does).
#include "../bfloat16.hpp"
#include "../float16.hpp"
#include "../simd/compat.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace xattn {

template <class T>
inline constexpr bool is_cache_element_v = std::is_same_v<T, float> || std::is_same_v<T, bfloat16> ||
                                           std::is_same_v<T, float16> || std::is_same_v<T, std::int8_t>;

/// Features per int8 scale.
inline constexpr std::size_t quant_group = 32;

/// Where a page's codes and scales of one head lie: feature d of row r at code(r, d) elements
/// from the rows' start, scale g of row r (int8) at scale(r, g) floats from the scales' start.
/// Rows stand one after the other (row_step = dim), except a cache's int8 keys, which interleave
/// their rows by pairs of features (row_step 2, pair_stride 2 · page_size: a pair of features of
/// 16 consecutive rows is 32 contiguous bytes) and store each group's scales of all rows together
/// (scale_stride page_size), the layout the integer score product reads (kernel/qk_q8.hpp).
struct row_layout {
  std::size_t row_step = 0, pair_stride = 2, scale_row_step = 0, scale_stride = 1;

  std::size_t code(std::size_t r, std::size_t d) const noexcept { return r * row_step + d / 2 * pair_stride + d % 2; }
  std::size_t scale(std::size_t r, std::size_t g) const noexcept { return r * scale_row_step + g * scale_stride; }
};

/// One page's rows of one head: codes at rows, int8 scales at scales (else null), placed as
/// `layout` says.
template <class T>
struct page_rows {
  const T* rows = nullptr;
  const float* scales = nullptr;
  row_layout layout;

  /// Row r's feature d as stored (an int8 code), and row r's scale g.
  T code(std::size_t r, std::size_t d) const noexcept { return rows[layout.code(r, d)]; }
  float scale(std::size_t r, std::size_t g) const noexcept { return scales[layout.scale(r, g)]; }
  /// Feature d of row r, dequantized.
  float at(std::size_t r, std::size_t d) const noexcept {
    if constexpr (std::is_same_v<T, std::int8_t>)
      return float(code(r, d)) * scale(r, d / quant_group);
    else
      return float(code(r, d));
  }
};

namespace detail {

/// q8_0 of 32 contiguous floats into out; returns the scale. The same bits as the scalar loop of
/// page_format::write: amax by max, one division, products by 1 / scale, rounded half away from
/// zero (trunc, then the exact remainder decides).
inline float quantize_group(const float* x, std::int8_t* out) noexcept {
  using B = simd::batch<float>;
  constexpr std::size_t w = simd::width<float>, n = quant_group / w;
  B v[n], m(0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = simd::load(x + i * w);
    m = xsimd::max(m, xsimd::abs(v[i]));
  }
  const float amax = simd::hmax(m), s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
  alignas(64) float q[quant_group];
  for (std::size_t i = 0; i < n; ++i) {
    const B y = v[i] * B(inv), t = xsimd::trunc(y);
    const B r = xsimd::select(xsimd::abs(y - t) >= B(0.5f), t + xsimd::copysign(B(1.0f), y), t);
    xsimd::min(xsimd::max(r, B(-127.0f)), B(127.0f)).store_aligned(q + i * w);
  }
  for (std::size_t d = 0; d < quant_group; ++d) out[d] = std::int8_t(q[d]);
  return s;
}

}  // namespace detail

/// The bytes of one head's part of a page, and writing a row into it.
template <class T>
struct page_format {
  static_assert(is_cache_element_v<T>, "xattn: kv_cache elements are float, bfloat16, float16 or std::int8_t");
  static constexpr bool quantized = std::is_same_v<T, std::int8_t>;

  std::size_t dim = 0, page_size = 0;
  bool interleaved = false;  // int8 rows by pairs of features (row_layout); keys are stored so

  std::size_t groups() const noexcept { return quantized ? (dim + quant_group - 1) / quant_group : 0; }
  row_layout layout() const noexcept {
    if (quantized && interleaved) return {2, 2 * page_size, 1, page_size};
    return {dim, 2, groups(), 1};
  }
  /// Bytes of one head's rows in a page, then of its scales, each rounded up to 64 (every head's
  /// rows and scales start on a cache line, so the scales are aligned floats).
  std::size_t rows_bytes() const noexcept {
    const std::size_t row = quantized && interleaved ? (dim + 1) / 2 * 2 : dim;
    return (page_size * row * sizeof(T) + 63) / 64 * 64;
  }
  std::size_t head_bytes() const noexcept {
    return rows_bytes() + (page_size * groups() * sizeof(float) + 63) / 64 * 64;
  }
  page_rows<T> view(const std::byte* head) const noexcept {
    const T* rows = reinterpret_cast<const T*>(head);
    const float* scales = quantized ? reinterpret_cast<const float*>(head + rows_bytes()) : nullptr;
    return {rows, scales, layout()};
  }
  /// Row r of the head at `head` := x (dim values `xs` apart, any element type).
  template <class X>
  void write(std::byte* head, std::size_t r, const X* x, std::ptrdiff_t xs) const noexcept {
    T* out = reinterpret_cast<T*>(head);
    const row_layout at = layout();
    if constexpr (quantized) {
      float* scale = reinterpret_cast<float*>(head + rows_bytes());
      std::int8_t codes[quant_group];
      for (std::size_t g = 0; g * quant_group < dim; ++g) {
        const std::size_t lo = g * quant_group, hi = std::min(dim, lo + quant_group);
        bool done = false;
        if constexpr (std::is_same_v<X, float>)
          if (xs == 1 && hi - lo == quant_group) {  // a whole group of contiguous floats: in registers
            scale[at.scale(r, g)] = detail::quantize_group(x + lo, codes);
            done = true;
          }
        if (!done) {
          float amax = 0;
          for (std::size_t d = lo; d < hi; ++d) amax = std::max(amax, std::abs(float(x[std::ptrdiff_t(d) * xs])));
          const float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
          scale[at.scale(r, g)] = s;
          for (std::size_t d = lo; d < hi; ++d)
            codes[d - lo] =
                std::int8_t(std::clamp(std::round(float(x[std::ptrdiff_t(d) * xs]) * inv), -127.0f, 127.0f));
        }
        if (!interleaved) {
          std::copy(codes, codes + (hi - lo), out + at.code(r, lo));
        } else {
          for (std::size_t d = lo; d < hi; ++d) out[at.code(r, d)] = codes[d - lo];
          if (hi % 2 != 0) out[at.code(r, hi)] = 0;  // an odd head size's last pair: a zero feature
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
