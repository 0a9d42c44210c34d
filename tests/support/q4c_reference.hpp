#pragma once
// Keys quantized per channel as KIVI defines it (Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric
// 2bit Quantization for KV Cache", §3: keys grouped per channel, asymmetric): over a group of
// tokens, each channel's zero point is its minimum m and its scale s = (max - m) / (2^B - 1); a
// value x becomes round((x - m) / s) and decodes as code · s + m. Written from that definition with
// B = 4, the group a cache page's tokens, the quotient taken as (x - m) · (1 / s) and rounded half
// up and the value code · s + m rounded once, as a cache's q4c pages do.
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace xattn::testing {

/// Keys (heads, n, dim) as pages of page_size tokens quantized per channel store them, decoded;
/// the last page's parameters are taken over the tokens it holds.
inline xt::xtensor<float, 3> q4c_rows(const xt::xtensor<float, 3>& x, std::size_t page_size) {
  xt::xtensor<float, 3> r = x;
  const std::size_t n = x.shape()[1], dim = x.shape()[2];
  for (std::size_t h = 0; h < x.shape()[0]; ++h)
    for (std::size_t lo = 0; lo < n; lo += page_size) {
      const std::size_t hi = std::min(n, lo + page_size);
      for (std::size_t d = 0; d < dim; ++d) {
        float m = x(h, lo, d), top = x(h, lo, d);
        for (std::size_t t = lo; t < hi; ++t) m = std::min(m, x(h, t, d)), top = std::max(top, x(h, t, d));
        const float s = (top - m) / 15.0f, inv = s > 0 ? 1.0f / s : 0.0f;
        for (std::size_t t = lo; t < hi; ++t)
          r(h, t, d) = std::fma(std::min(15.0f, std::floor(std::fma(x(h, t, d) - m, inv, 0.5f))), s, m);
      }
    }
  return r;
}

}  // namespace xattn::testing
