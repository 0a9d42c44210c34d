#pragma once
// Viridis: perceptually uniform, with lightness rising monotonically from dark
// purple to yellow, so a heatmap reads correctly in greyscale and for
// colour-blind viewers.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace xattn::viz {

struct rgb8 {
  std::uint8_t r = 0, g = 0, b = 0;
  friend constexpr bool operator==(const rgb8&, const rgb8&) = default;
};

namespace detail {

// The published viridis table (matplotlib's 256-entry listed map, CC0) resampled
// by linear interpolation at t = k / 32; linear interpolation between these 33
// anchors stays within 1.7/255 of the full table on every channel.
inline constexpr std::array<std::array<float, 3>, 33> viridis_anchors = {{
    {0.267004f, 0.004874f, 0.329415f}, {0.276987f, 0.050151f, 0.375542f}, {0.282302f, 0.094624f, 0.417024f},
    {0.282902f, 0.135449f, 0.453035f}, {0.278919f, 0.174879f, 0.482972f}, {0.270788f, 0.213324f, 0.506643f},
    {0.259266f, 0.250672f, 0.524378f}, {0.245374f, 0.286704f, 0.536971f}, {0.230223f, 0.321297f, 0.545488f},
    {0.214836f, 0.354470f, 0.551027f}, {0.199995f, 0.386377f, 0.554533f}, {0.186132f, 0.417256f, 0.556682f},
    {0.173302f, 0.447386f, 0.557850f}, {0.161265f, 0.477036f, 0.558125f}, {0.149668f, 0.506440f, 0.557329f},
    {0.138415f, 0.535767f, 0.555090f}, {0.128148f, 0.565107f, 0.550893f}, {0.120875f, 0.594465f, 0.544158f},
    {0.120325f, 0.623765f, 0.534308f}, {0.130961f, 0.652859f, 0.520817f}, {0.155378f, 0.681539f, 0.503240f},
    {0.192974f, 0.709556f, 0.481231f}, {0.241467f, 0.736626f, 0.454543f}, {0.298636f, 0.762445f, 0.423019f},
    {0.362859f, 0.786695f, 0.386589f}, {0.432985f, 0.809056f, 0.345271f}, {0.508094f, 0.829231f, 0.299221f},
    {0.587266f, 0.846982f, 0.248871f}, {0.669358f, 0.862217f, 0.195444f}, {0.752867f, 0.875089f, 0.142650f},
    {0.835913f, 0.886110f, 0.102462f}, {0.916550f, 0.896130f, 0.100822f}, {0.993248f, 0.906157f, 0.143936f},
}};

inline std::uint8_t to_byte(double c) noexcept { return static_cast<std::uint8_t>(std::lround(c * 255.0)); }

}  // namespace detail

// t in [0, 1] -> colour; t outside is clamped and NaN maps to t = 0, so a
// caller's rounding slop never indexes out of the table.
inline rgb8 viridis(double t) noexcept {
  constexpr int segments = static_cast<int>(detail::viridis_anchors.size()) - 1;
  const double s = (t > 0.0 ? std::min(t, 1.0) : 0.0) * segments;
  const int k = std::min(static_cast<int>(s), segments - 1);
  const double f = s - k;
  const auto& a = detail::viridis_anchors[static_cast<std::size_t>(k)];
  const auto& b = detail::viridis_anchors[static_cast<std::size_t>(k) + 1];
  const auto mix = [f](float x, float y) { return detail::to_byte(x + (y - x) * f); };
  return {mix(a[0], b[0]), mix(a[1], b[1]), mix(a[2], b[2])};
}

}  // namespace xattn::viz
