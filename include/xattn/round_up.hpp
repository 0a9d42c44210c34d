#pragma once
// Sizes rounded up to whole blocks (SIMD batches, register strips, tiles): the one place this is
// written.
#include <cstddef>

namespace xattn {

/// n rounded up to a multiple of `multiple` (> 0).
constexpr std::size_t round_up(std::size_t n, std::size_t multiple) noexcept {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace xattn
