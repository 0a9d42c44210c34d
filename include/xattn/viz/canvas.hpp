#pragma once
// An RGB8 raster to draw heatmaps on before encoding. Drawing clips to the
// canvas, so layout code can place text near edges without bounds checks.

#include <xattn/viz/colormap.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace xattn::viz {

class canvas {
 public:
  canvas(int width, int height, rgb8 background)
      : width_(std::max(width, 0)),
        height_(std::max(height, 0)),
        pixels_(static_cast<std::size_t>(width_) * static_cast<std::size_t>(height_) * 3) {
    fill_rect(0, 0, width_, height_, background);
  }

  int width() const noexcept { return width_; }
  int height() const noexcept { return height_; }

  // Row-major, 3 bytes per pixel, no row padding: the layout PNG encoders take.
  const std::uint8_t* data() const noexcept { return pixels_.data(); }

  // Precondition: 0 <= x < width(), 0 <= y < height().
  rgb8 at(int x, int y) const noexcept {
    const std::uint8_t* p = pixels_.data() + offset(x, y);
    return {p[0], p[1], p[2]};
  }

  void fill_rect(int x, int y, int w, int h, rgb8 c) noexcept {
    const int x0 = std::max(x, 0), x1 = std::min(x + w, width_);
    const int y0 = std::max(y, 0), y1 = std::min(y + h, height_);
    for (int yy = y0; yy < y1; ++yy) {
      std::uint8_t* p = pixels_.data() + offset(x0, yy);
      for (int xx = x0; xx < x1; ++xx, p += 3) {
        p[0] = c.r;
        p[1] = c.g;
        p[2] = c.b;
      }
    }
  }

 private:
  std::size_t offset(int x, int y) const noexcept {
    return (static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)) * 3;
  }

  int width_, height_;
  std::vector<std::uint8_t> pixels_;
};

}  // namespace xattn::viz
