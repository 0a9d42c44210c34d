#pragma once
// Draws strings with the built-in bitmap font, each font pixel a scale x scale
// block. Vertical text reads bottom to top, the way y-axis labels usually do.

#include <xattn/viz/bitmap_font.hpp>
#include <xattn/viz/canvas.hpp>

#include <string_view>

namespace xattn::viz {

enum class text_direction { horizontal, vertical_up };

// Extent along the reading direction; no trailing blank column.
inline int text_width(std::string_view s, int scale) noexcept {
  return s.empty() ? 0 : static_cast<int>(s.size()) * font::advance * scale - scale;
}

// Extent across the reading direction, descenders included.
inline int text_height(int scale) noexcept { return font::glyph_height * scale; }

// (x, y) is the top-left corner of the text's bounding box in either direction.
inline void draw_text(canvas& img, int x, int y, std::string_view s, rgb8 colour, int scale,
                      text_direction dir = text_direction::horizontal) {
  const int w = text_width(s, scale);
  for (std::size_t n = 0; n < s.size(); ++n) {
    const int gx0 = static_cast<int>(n) * font::advance * scale;
    for (int gy = 0; gy < font::glyph_height; ++gy) {
      for (int gx = 0; gx < font::glyph_width; ++gx) {
        if (!font::pixel(s[n], gx, gy)) continue;
        const int hx = gx0 + gx * scale, hy = gy * scale;  // block in horizontal layout
        if (dir == text_direction::horizontal) {
          img.fill_rect(x + hx, y + hy, scale, scale, colour);
        } else {  // rotate 90 degrees counter-clockwise
          img.fill_rect(x + hy, y + w - hx - scale, scale, scale, colour);
        }
      }
    }
  }
}

}  // namespace xattn::viz
