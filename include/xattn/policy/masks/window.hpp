#pragma once
// Sliding window (Longformer, Mistral, ONNX-25 left/right_window_size): query i sees keys
// j with pos(i) - left <= j <= pos(i) + right, pos(i) = i (top_left) or i + Skv - Sq (bottom_right).
// window(left, 0) is causal with a window. Masked keys are excluded.
#include "../problem.hpp"
#include "causal.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

namespace xattn {

struct window_mask {
  std::int64_t left, right;
  align where = align::top_left;
  std::int64_t shift = 0;

  bool visible(std::size_t, std::size_t, std::size_t i, std::size_t j) const noexcept {
    const std::int64_t p = std::int64_t(i) + shift, k = std::int64_t(j);
    return k >= p - left && k <= p + right;
  }
  std::pair<std::int64_t, std::int64_t> row_span(std::size_t, std::size_t, std::size_t i) const noexcept {
    const std::int64_t p = std::int64_t(i) + shift;
    return {p - left, p + right + 1};
  }
  block classify(std::size_t, std::size_t, std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) const {
    const std::int64_t p0 = std::int64_t(i0) + shift, p1 = std::int64_t(i1) - 1 + shift;
    const std::int64_t k0 = std::int64_t(j0), k1 = std::int64_t(j1) - 1;
    if (k0 > p1 + right || k1 < p0 - left) return block::hidden;
    if (k0 >= p1 - left && k1 <= p0 + right) return block::visible;
    return block::partial;
  }
  window_mask bind(const problem& pr) const {
    if (left < 0 || right < 0) fail("window(left, right): sizes must be >= 0, got (", left, ", ", right, ")");
    window_mask b = *this;
    b.shift = where == align::top_left ? 0 : std::int64_t(pr.kv_len) - std::int64_t(pr.q_len);
    const auto reach = std::int64_t(pr.q_len + pr.kv_len);  // wider bounds change nothing: clamp, never overflow
    b.left = std::min(left, reach);
    b.right = std::min(right, reach);
    return b;
  }
};

inline constexpr std::int64_t unbounded = std::numeric_limits<std::int32_t>::max();

inline window_mask window(std::int64_t left, std::int64_t right, align where = align::top_left) {
  return {left, right, where, 0};
}

}  // namespace xattn
