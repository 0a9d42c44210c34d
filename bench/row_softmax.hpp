// Vectorised softmax of one score row, for the unfused BLAS baseline (xsimd 8.1: no reduce_max,
// so the horizontal max goes through a lane array).
#pragma once

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>

namespace xattn_bench {

using float_batch = xsimd::batch<float>;

inline float row_max(const float* x, std::size_t n) {
  constexpr std::size_t w = float_batch::size;
  float_batch acc(-std::numeric_limits<float>::infinity());
  std::size_t i = 0;
  for (; i + w <= n; i += w) acc = xsimd::max(acc, float_batch::load_unaligned(x + i));
  alignas(64) std::array<float, w> lanes;
  acc.store_aligned(lanes.data());
  float m = *std::max_element(lanes.begin(), lanes.end());
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// x[j] = exp(x[j] - shift) in place; returns the sum.
inline float exp_shifted_in_place(float* x, std::size_t n, float shift) {
  constexpr std::size_t w = float_batch::size;
  float_batch const vshift(shift);
  float_batch vsum(0.0f);
  std::size_t i = 0;
  for (; i + w <= n; i += w) {
    float_batch const e = xsimd::exp(float_batch::load_unaligned(x + i) - vshift);
    e.store_unaligned(x + i);
    vsum += e;
  }
  float sum = xsimd::hadd(vsum);
  for (; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

// Turns row[0, visible) into unnormalised softmax weights and zeroes row[visible, n) (the causal
// mask). Returns 1/sum: the caller scales the Sq×D output instead of the Sq×Skv weights, one pass fewer.
inline float softmax_row_unnormalised(float* row, std::size_t visible, std::size_t n) {
  std::fill(row + visible, row + n, 0.0f);
  if (visible == 0) return 0.0f;
  float const sum = exp_shifted_in_place(row, visible, row_max(row, visible));
  return 1.0f / sum;
}

}  // namespace xattn_bench
