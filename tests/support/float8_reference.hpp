#pragma once
// OCP FP8 E4M3 (E4M3FN) written from the specification's definitions, independently of
// xattn::float8_e4m3: a code's value, and the nearest code found by trying every finite one.
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace xattn::testing {

/// (-1)^s · 2^(e - 7) · (1 + m / 8), or 2^-6 · m / 8 when e = 0 (codes 0x7f and 0xff are NaN).
inline double e4m3_value(unsigned code) {
  const unsigned s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, int(e) - 7);
  return s ? -mag : mag;
}

/// The finite code nearest y; halfway between two, the one whose mantissa is even; beyond the
/// largest (448), the largest (saturating, as the conversions of vLLM and NVIDIA's satfinite do).
inline unsigned e4m3_nearest(double y) {
  const unsigned sign = std::signbit(y) ? 0x80 : 0;
  const double a = std::abs(y);
  unsigned best = 0;
  for (unsigned c = 1; c <= 0x7e; ++c) {
    const double d = std::abs(e4m3_value(c) - a), db = std::abs(e4m3_value(best) - a);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return sign | best;
}

/// Rows (heads, n, dim) quantized as a cache's float8_e4m3 pages store them: per token, one scale
/// per 32 features, amax / 448, each feature the code nearest x · (1 / scale); returned decoded.
inline xt::xtensor<float, 3> e4m3_rows(const xt::xtensor<float, 3>& x) {
  xt::xtensor<float, 3> r = x;
  const std::size_t dim = x.shape()[2];
  for (std::size_t h = 0; h < x.shape()[0]; ++h)
    for (std::size_t t = 0; t < x.shape()[1]; ++t)
      for (std::size_t lo = 0; lo < dim; lo += 32) {
        const std::size_t hi = std::min(dim, lo + 32);
        float amax = 0;
        for (std::size_t d = lo; d < hi; ++d) amax = std::max(amax, std::fabs(x(h, t, d)));
        const float s = amax / 448.0f, inv = s > 0 ? 1.0f / s : 0.0f;
        for (std::size_t d = lo; d < hi; ++d) r(h, t, d) = float(e4m3_value(e4m3_nearest(x(h, t, d) * inv))) * s;
      }
  return r;
}

}  // namespace xattn::testing
