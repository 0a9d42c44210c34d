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
#include <vector>

namespace xattn {

struct window_mask {
  std::int64_t left, right;
  align where = align::top_left;
  std::int64_t shift = 0;
  std::vector<std::int64_t> shifts;  // per batch row, over a cache's sequences of different lengths

  std::int64_t shift_of(std::size_t b) const noexcept { return shifts.empty() ? shift : shifts[b]; }
  bool visible(std::size_t b, std::size_t, std::size_t i, std::size_t j) const noexcept {
    const std::int64_t p = std::int64_t(i) + shift_of(b), k = std::int64_t(j);
    return k >= p - left && k <= p + right;
  }
  std::pair<std::int64_t, std::int64_t> row_span(std::size_t b, std::size_t, std::size_t i) const noexcept {
    const std::int64_t p = std::int64_t(i) + shift_of(b);
    return {p - left, p + right + 1};
  }
  block classify(std::size_t b, std::size_t, std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) const {
    const std::int64_t shift = shift_of(b), p0 = std::int64_t(i0) + shift, p1 = std::int64_t(i1) - 1 + shift;
    const std::int64_t k0 = std::int64_t(j0), k1 = std::int64_t(j1) - 1;
    if (k0 > p1 + right || k1 < p0 - left) return block::hidden;
    if (k0 >= p1 - left && k1 <= p0 + right) return block::visible;
    return block::partial;
  }
  window_mask bind(const problem& pr) const {
    if (left < 0 || right < 0) fail("window(left, right): sizes must be >= 0, got (", left, ", ", right, ")");
    window_mask b = *this;
    b.shift = where == align::top_left ? 0 : pr.bottom_right_shift(0);
    if (where == align::bottom_right && !pr.kv_lens.empty())
      for (std::size_t n = 0; n < pr.batch; ++n) b.shifts.push_back(pr.bottom_right_shift(n));
    const auto reach = std::int64_t(pr.q_len + pr.kv_len);  // wider bounds change nothing: clamp, never overflow
    b.left = std::min(left, reach);
    b.right = std::min(right, reach);
    return b;
  }
};

inline constexpr std::int64_t unbounded = std::numeric_limits<std::int32_t>::max();

inline window_mask window(std::int64_t left, std::int64_t right, align where = align::top_left) {
  return {left, right, where, 0, {}};
}

/// sink_tokens(n): the first n keys, kept visible through a sliding window (StreamingLLM).
struct sink_tokens {
  std::int64_t n;
  explicit sink_tokens(std::int64_t count) : n(count) {}
};

/// A sliding window whose first n keys stay visible to every query the window's right bound
/// allows: key j is visible from position p when p - left <= j <= p + right, or j < n and
/// j <= p + right. Two spans per row, so no row_span; hide_row fills around both.
struct streaming_window_mask {
  window_mask win;
  std::int64_t n;

  bool visible(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const noexcept {
    const std::int64_t k = std::int64_t(j);
    return win.visible(b, h, i, j) || (k < n && k <= std::int64_t(i) + win.shift_of(b) + win.right);
  }
  /// Exact: a row p sees all of [k0, k1] when k1 <= p + right and the keys lie in the sink tokens,
  /// in the window, or the two spans meet (n >= p - left); the last two hold for every row up to
  /// the block's last one once they hold for it.
  block classify(std::size_t b, std::size_t, std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) const {
    const std::int64_t p0 = std::int64_t(i0) + win.shift_of(b), p1 = std::int64_t(i1) - 1 + win.shift_of(b);
    const std::int64_t k0 = std::int64_t(j0), k1 = std::int64_t(j1) - 1, l = win.left, r = win.right;
    const bool window_hidden = k0 > p1 + r || k1 < p0 - l, tokens_hidden = k0 >= n || k0 > p1 + r;
    if (window_hidden && tokens_hidden) return block::hidden;
    return k1 <= p0 + r && (k1 < n || p1 <= std::max(k0, n) + l) ? block::visible : block::partial;
  }
  template <class T>
  void hide_row(T* s, std::size_t cols, std::size_t b, std::size_t, std::size_t i, std::size_t j0, T value) const {
    const std::int64_t p = std::int64_t(i) + win.shift_of(b);
    const auto clamp = [&](std::int64_t j) {
      return std::size_t(std::clamp<std::int64_t>(j - std::int64_t(j0), 0, std::int64_t(cols)));
    };
    const std::size_t hi = clamp(p + win.right + 1), lo = std::min(hi, clamp(p - win.left)),
                      tokens = std::min(lo, clamp(std::min(n, p + win.right + 1)));
    std::fill(s + tokens, s + lo, value);
    std::fill(s + hi, s + cols, value);
  }
  streaming_window_mask bind(const problem& pr) const {
    if (n < 0) fail("window(left, right, sink_tokens(n)): n must be >= 0, got ", n);
    return {win.bind(pr), std::min(n, std::int64_t(pr.kv_len))};
  }
};

/// window(left, right, sink_tokens(n)[, where]): a sliding window that keeps the first n keys.
inline streaming_window_mask window(std::int64_t left, std::int64_t right, sink_tokens tokens,
                                    align where = align::top_left) {
  return {window(left, right, where), tokens.n};
}

}  // namespace xattn
