#pragma once
// llama.cpp's q4_0 as its format defines it (ggml-quants: quantize_row_q4_0_ref), written from
// that definition: per group of 32, m the feature of largest magnitude with its sign, d = m / -8,
// code min(15, trunc(x · (1 / d) + 8.5)), value (code - 8) · d. The scale stays a float here, as a
// cache's q4 pages keep it (q4_0 rounds it to float16).
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace xattn::testing {

/// The code of x in a group of scale d (1 / d given, 0 for an all-zero group).
inline unsigned q4_0_code(float x, float inv) { return unsigned(std::min(15, int(x * inv + 8.5f))); }

/// Rows (heads, n, dim) as q4_0 stores them, returned decoded; a head size's last, partial group
/// has the scale of its own features.
inline xt::xtensor<float, 3> q4_0_rows(const xt::xtensor<float, 3>& x) {
  xt::xtensor<float, 3> r = x;
  const std::size_t dim = x.shape()[2];
  for (std::size_t h = 0; h < x.shape()[0]; ++h)
    for (std::size_t t = 0; t < x.shape()[1]; ++t)
      for (std::size_t lo = 0; lo < dim; lo += 32) {
        const std::size_t hi = std::min(dim, lo + 32);
        float amax = 0, m = 0;
        for (std::size_t d = lo; d < hi; ++d)
          if (amax < std::fabs(x(h, t, d))) amax = std::fabs(x(h, t, d)), m = x(h, t, d);
        const float s = m / -8.0f, inv = s != 0 ? 1.0f / s : 0.0f;
        for (std::size_t d = lo; d < hi; ++d) r(h, t, d) = float(int(q4_0_code(x(h, t, d), inv)) - 8) * s;
      }
  return r;
}

}  // namespace xattn::testing
