#pragma once
// Attention weights as a PNG heatmap, laid out like d2l's show_heatmaps: a grid
// of panels, each with queries down and keys across, a shared colour scale,
// tick labels on the outer panels and an optional colorbar.
//
// Accepted shapes: (Q, K) one panel; (N, Q, K) one row of N panels (e.g. heads);
// (R, C, Q, K) an R x C grid. Geometry: heatmap_layout.hpp. Linking: png.hpp.

#include <xattn/viz/colormap.hpp>
#include <xattn/viz/heatmap_layout.hpp>
#include <xattn/viz/heatmap_options.hpp>
#include <xattn/viz/png.hpp>
#include <xattn/viz/text.hpp>

#include <xtensor/xarray.hpp>
#include <xtensor/xexpression.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "../error.hpp"

namespace xattn::viz {

namespace detail {

inline std::string number_string(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The weights evaluated once, viewed as (grid rows, grid cols, queries, keys).
struct panel_grid {
  std::size_t rows = 1, cols = 1, queries = 0, keys = 0;
  xt::xarray<double, xt::layout_type::row_major> values;

  double at(std::size_t r, std::size_t c, std::size_t i, std::size_t j) const {
    return values.data()[((r * cols + c) * queries + i) * keys + j];
  }
};

template <class E>
panel_grid to_panel_grid(const xt::xexpression<E>& weights) {
  const auto& e = weights.derived_cast();
  const auto& shape = e.shape();
  const std::size_t rank = shape.size();
  if (rank < 2 || rank > 4) {
    throw std::invalid_argument(
        "xattn: heatmap: weights must have rank 2 (queries, keys), 3 (panels, queries, "
        "keys) or 4 (rows, cols, queries, keys), got shape " +
        xattn::shape_str(shape));
  }
  if (std::find(shape.begin(), shape.end(), std::size_t{0}) != shape.end()) {
    throw std::invalid_argument("xattn: heatmap: weights must not be empty, got shape " + xattn::shape_str(shape));
  }
  panel_grid g;
  g.values = e;  // evaluates a lazy expression exactly once
  if (rank == 4) g.rows = shape[0];
  if (rank >= 3) g.cols = shape[rank - 3];
  g.queries = shape[rank - 2];
  g.keys = shape[rank - 1];

  const double* v = g.values.data();
  for (std::size_t n = 0; n < g.values.size(); ++n) {
    if (std::isfinite(v[n])) continue;
    std::vector<std::size_t> index(rank);
    for (std::size_t k = rank, rest = n; k-- > 0; rest /= shape[k]) index[k] = rest % shape[k];
    throw std::invalid_argument("xattn: heatmap: weights must be finite, got " + number_string(v[n]) + " at index " +
                                xattn::shape_str(index) + " of shape " + xattn::shape_str(shape));
  }
  return g;
}

// Colour scale ends: the user's, else the data's extent.
inline std::pair<double, double> value_range(const panel_grid& g, const heatmap_options& opt) {
  if (opt.range) {
    const auto [lo, hi] = *opt.range;
    if (!(std::isfinite(lo) && std::isfinite(hi) && lo < hi)) {
      throw std::invalid_argument("xattn: heatmap: options.range must be finite with lo < hi, got {" +
                                  number_string(lo) + ", " + number_string(hi) + "}");
    }
    return {lo, hi};
  }
  const auto [mn, mx] = std::minmax_element(g.values.data(), g.values.data() + g.values.size());
  return {*mn, *mx};
}

// Constant data (lo == hi) maps to the bottom of the scale, as matplotlib does.
inline double normalise(double v, double lo, double hi) { return hi > lo ? (v - lo) / (hi - lo) : 0.0; }

inline constexpr rgb8 background{255, 255, 255};
inline constexpr rgb8 ink{34, 34, 34};

// A frame drawn just outside r, so every pixel inside r stays a data colour.
inline void draw_frame(canvas& img, const rect& r, int t, rgb8 c) {
  img.fill_rect(r.x - t, r.y - t, r.w + 2 * t, t, c);
  img.fill_rect(r.x - t, r.y + r.h, r.w + 2 * t, t, c);
  img.fill_rect(r.x - t, r.y, t, r.h, c);
  img.fill_rect(r.x + r.w, r.y, t, r.h, c);
}

}  // namespace detail

// Draws the heatmap into an image without encoding it; throws
// std::invalid_argument for bad weights (rank, emptiness, non-finite values)
// or options, naming which.
template <class E>
canvas render_heatmap(const xt::xexpression<E>& weights, const heatmap_options& options = {}) {
  const detail::panel_grid g = detail::to_panel_grid(weights);
  const auto [lo, hi] = detail::value_range(g, options);
  const heatmap_layout lay = make_heatmap_layout(g.rows, g.cols, g.queries, g.keys, options, lo, hi);

  const int s = lay.scale, c = lay.cell;
  const int lh = text_height(s), cap = font::cap_height * s;
  const int tl = lay.tick_length, tg = lay.tick_gap, stroke = std::max(1, s / 2);
  canvas img(lay.width, lay.height, detail::background);

  for (std::size_t r = 0; r < g.rows; ++r) {
    for (std::size_t q = 0; q < g.cols; ++q) {
      const rect& p = lay.panel(r, q);
      for (std::size_t i = 0; i < g.queries; ++i) {
        for (std::size_t j = 0; j < g.keys; ++j) {
          const rgb8 colour = viridis(detail::normalise(g.at(r, q, i, j), lo, hi));
          img.fill_rect(p.x + static_cast<int>(j) * c, p.y + static_cast<int>(i) * c, c, c, colour);
        }
      }
      detail::draw_frame(img, p, stroke, detail::ink);

      if (!options.titles.empty()) {
        const std::string& t = options.titles[r * g.cols + q];
        draw_text(img, p.x + (p.w - text_width(t, s)) / 2, p.y - lh - s, t, detail::ink, s);
      }
      if (r + 1 == g.rows) {  // x ticks and label under the bottom row only
        for (const std::size_t j : lay.x_ticks) {
          const int xc = p.x + static_cast<int>(j) * c + c / 2;
          const std::string label = std::to_string(j);
          img.fill_rect(xc - stroke / 2, p.y + p.h, stroke, tl, detail::ink);
          draw_text(img, xc - text_width(label, s) / 2, p.y + p.h + tl + tg, label, detail::ink, s);
        }
        const int w = text_width(options.xlabel, s);
        draw_text(img, p.x + (p.w - w) / 2, p.y + p.h + tl + tg + lh + s, options.xlabel, detail::ink, s);
      }
      if (q == 0) {  // y ticks and label beside the first column only
        for (const std::size_t i : lay.y_ticks) {
          const int yc = p.y + static_cast<int>(i) * c + c / 2;
          const std::string label = std::to_string(i);
          img.fill_rect(p.x - tl, yc - stroke / 2, tl, stroke, detail::ink);
          draw_text(img, p.x - tl - tg - text_width(label, s), yc - cap / 2, label, detail::ink, s);
        }
        const int w = text_width(options.ylabel, s);
        draw_text(img, lay.ylabel_x, p.y + (p.h - w) / 2, options.ylabel, detail::ink, s, text_direction::vertical_up);
      }
    }
  }

  if (lay.has_colorbar) {
    const rect& b = lay.colorbar;
    for (int y = 0; y < b.h; ++y) {  // top row is 1 (hi), bottom row is 0 (lo)
      const double t = b.h > 1 ? static_cast<double>(b.h - 1 - y) / (b.h - 1) : 1.0;
      img.fill_rect(b.x, b.y + y, b.w, 1, viridis(t));
    }
    detail::draw_frame(img, b, stroke, detail::ink);
    for (const auto& [value, y] : lay.colorbar_ticks) {
      img.fill_rect(b.x + b.w, y - stroke / 2, tl, stroke, detail::ink);
      draw_text(img, b.x + b.w + tl + tg, y - cap / 2, format_value(value), detail::ink, s);
    }
  }
  return img;
}

// Renders and writes a PNG. Throws std::invalid_argument as render_heatmap
// does, and naming the path if the file cannot be written.
template <class E>
void write_heatmap(const std::filesystem::path& path, const xt::xexpression<E>& weights,
                   const heatmap_options& options = {}) {
  const canvas img = render_heatmap(weights, options);
  if (!write_png(path, img)) {
    throw std::invalid_argument("xattn: heatmap: could not write PNG to '" + path.string() + "'");
  }
}

}  // namespace xattn::viz
