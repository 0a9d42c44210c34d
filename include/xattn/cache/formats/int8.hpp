#pragma once
// int8 pages as llama.cpp's q8_0 stores them: one float scale per group of 32 features, each
// feature round(x · (1 / scale)) with scale = max|x| / 127 (rounded half away from zero, as q8_0
// does). A cache's keys interleave their rows by pairs of features (row_layout), which the integer
// score product reads (kernel/qk_q8.hpp); values stand one row after the other.
#include "../../kernel/q8_row.hpp"
#include "../../simd/compat.hpp"
#include "../format.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace xattn {

/// Features per int8 scale.
inline constexpr std::size_t quant_group = 32;

namespace detail {

/// q8_0 of 32 contiguous floats into out; returns the scale. The same bits as the scalar loop of
/// cache_format<std::int8_t>::quantize: amax by max, one division, products by 1 / scale, rounded
/// half away from zero (trunc, then the exact remainder decides).
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

template <>
struct cache_format<std::int8_t> {
  static constexpr bool is_format = true;
  static constexpr bool quantized = true;
  using code = std::int8_t;
  static constexpr std::size_t group = quant_group;
  static constexpr const char* name = "int8 (q8_0)";
  static constexpr bool interleaves_keys = true;

  template <class X>
  static float quantize(const X* x, std::ptrdiff_t xs, std::size_t n, std::int8_t* out) noexcept {
    if constexpr (std::is_same_v<X, float>)
      if (xs == 1 && n == group) return detail::quantize_group(x, out);  // in registers
    float amax = 0;
    for (std::size_t d = 0; d < n; ++d) amax = std::max(amax, std::abs(float(x[std::ptrdiff_t(d) * xs])));
    const float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
    for (std::size_t d = 0; d < n; ++d)
      out[d] = std::int8_t(std::clamp(std::round(float(x[std::ptrdiff_t(d) * xs]) * inv), -127.0f, 127.0f));
    return s;
  }
  static float value(std::int8_t c, float scale) noexcept { return float(c) * scale; }

  /// Row handles: keys interleaved by pairs (scale_stride apart), values alone.
  static kernel::q8_pair_row row(const std::int8_t* q, const float* scale, std::size_t col,
                                 const row_layout& at) noexcept {
    return {q, scale, col, at.scale_stride};
  }
};

}  // namespace xattn
