#pragma once
// A user mask policy: a symmetric band |i - j| <= radius (local attention). It declares
// classify() so the kernel skips blocks outside the band and runs blocks inside it mask-free.
#include <xattn/policy/problem.hpp>

#include <cstddef>
#include <cstdint>

namespace dsl {

// [snippet band_mask]
struct band_mask {
  std::int64_t radius;

  bool visible(std::size_t, std::size_t, std::size_t i, std::size_t j) const {
    const auto d = std::int64_t(i) - std::int64_t(j);
    return d <= radius && -d <= radius;
  }
  xattn::block classify(std::size_t, std::size_t, std::size_t i0, std::size_t i1, std::size_t j0,
                        std::size_t j1) const {
    const auto lo = std::int64_t(i0) - radius, hi = std::int64_t(i1) - 1 + radius;  // union of the rows' bands
    if (std::int64_t(j1) - 1 < lo || std::int64_t(j0) > hi) return xattn::block::hidden;
    const auto in_lo = std::int64_t(i1) - 1 - radius, in_hi = std::int64_t(i0) + radius;  // intersection
    if (std::int64_t(j0) >= in_lo && std::int64_t(j1) - 1 <= in_hi) return xattn::block::visible;
    return xattn::block::partial;
  }
};
// [end band_mask]

}  // namespace dsl
