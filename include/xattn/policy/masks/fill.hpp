#pragma once
// Filling the hidden part of one score row when a mask knows its visible span: what the kernel does
// for masks with row_span(), and what a mask's own hide_row() may call.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace xattn {

/// s[c] = value for the keys j0 + c (c < cols) outside the visible span [first, last).
template <class T>
void fill_outside(T* s, std::size_t cols, std::size_t j0, std::pair<std::int64_t, std::int64_t> span, T value) {
  const auto clamp = [&](std::int64_t j) {
    return std::size_t(std::clamp<std::int64_t>(j - std::int64_t(j0), 0, std::int64_t(cols)));
  };
  const std::size_t lo = clamp(span.first), hi = std::max(lo, clamp(span.second));
  std::fill(s, s + lo, value);
  std::fill(s + hi, s + cols, value);
}

}  // namespace xattn
