#pragma once
// Line plots of a few series over their index (a training loss per step), on the heatmaps' canvas
// and font: axes with the y range labelled, one colour per series with its name, optional log y.
#include <xattn/viz/canvas.hpp>
#include <xattn/viz/png.hpp>
#include <xattn/viz/text.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace xattn::viz {

struct line_series {
  std::string name;
  std::vector<double> y;  // y[n] is drawn at x = n
};

struct line_plot_options {
  int width = 640, height = 400;
  bool log_y = false;  // log10 scale (every value must be > 0)
  std::string xlabel = "step";
  std::string title;
};

namespace detail {
inline std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}
/// Pixels along the segment (x0, y0)-(x1, y1), 2 px thick.
inline void draw_segment(canvas& img, int x0, int y0, int x1, int y1, rgb8 c) {
  const int n = std::max({std::abs(x1 - x0), std::abs(y1 - y0), 1});
  for (int k = 0; k <= n; ++k) {
    const int x = x0 + (x1 - x0) * k / n, y = y0 + (y1 - y0) * k / n;
    img.fill_rect(x - 1, y - 1, 2, 2, c);
  }
}
}  // namespace detail

/// Throws std::invalid_argument for no series, an empty series, or a value log_y cannot show.
inline canvas render_line_plot(const std::vector<line_series>& series, const line_plot_options& o = {}) {
  if (series.empty()) throw std::invalid_argument("xattn: line_plot: no series");
  double lo = INFINITY, hi = -INFINITY;
  std::size_t n_max = 0;
  for (const auto& s : series) {
    if (s.y.empty()) throw std::invalid_argument("xattn: line_plot: series '" + s.name + "' is empty");
    for (double v : s.y) {
      if (!std::isfinite(v) || (o.log_y && !(v > 0)))
        throw std::invalid_argument("xattn: line_plot: series '" + s.name + "' has the value " +
                                    detail::short_number(v) + (o.log_y ? " (log_y needs finite values > 0)" : ""));
      const double t = o.log_y ? std::log10(v) : v;
      lo = std::min(lo, t);
      hi = std::max(hi, t);
    }
    n_max = std::max(n_max, s.y.size());
  }
  if (hi <= lo) hi = lo + 1;
  static constexpr rgb8 palette[] = {{31, 119, 180}, {214, 39, 40}, {44, 160, 44}, {148, 103, 189}};
  const rgb8 ink{34, 34, 34};
  canvas img(o.width, o.height, rgb8{255, 255, 255});
  const int s = 2, left = 110, right = 20, top = o.title.empty() ? 20 : 44, bottom = 50;
  const int w = o.width - left - right, h = o.height - top - bottom;
  img.fill_rect(left, top, 2, h, ink);
  img.fill_rect(left, top + h, w, 2, ink);
  auto label = [&](double t) { return detail::short_number(o.log_y ? std::pow(10.0, t) : t); };
  draw_text(img, left - 8 - text_width(label(hi), s), top, label(hi), ink, s);
  draw_text(img, left - 8 - text_width(label(lo), s), top + h - text_height(s), label(lo), ink, s);
  draw_text(img, left, top + h + 8, "0", ink, s);
  const std::string last = std::to_string(n_max - 1);
  draw_text(img, left + w - text_width(last, s), top + h + 8, last, ink, s);
  draw_text(img, left + (w - text_width(o.xlabel, s)) / 2, top + h + 8, o.xlabel, ink, s);
  if (!o.title.empty()) draw_text(img, left + (w - text_width(o.title, s)) / 2, 10, o.title, ink, s);
  for (std::size_t k = 0; k < series.size(); ++k) {
    const rgb8 c = palette[k % 4];
    const auto& y = series[k].y;
    auto px = [&](std::size_t n) {
      return left + int(double(w) * double(n) / double(std::max<std::size_t>(n_max - 1, 1)));
    };
    auto py = [&](std::size_t n) {
      const double t = o.log_y ? std::log10(y[n]) : y[n];
      return top + h - int(double(h) * (t - lo) / (hi - lo));
    };
    for (std::size_t n = 0; n + 1 < y.size(); ++n) detail::draw_segment(img, px(n), py(n), px(n + 1), py(n + 1), c);
    if (y.size() == 1) img.fill_rect(px(0) - 2, py(0) - 2, 4, 4, c);
    draw_text(img, left + w - text_width(series[k].name, s) - 8, top + 8 + int(k) * (text_height(s) + 6),
              series[k].name, c, s);
  }
  return img;
}

inline void write_line_plot(const std::filesystem::path& path, const std::vector<line_series>& series,
                            const line_plot_options& options = {}) {
  if (!write_png(path, render_line_plot(series, options)))
    throw std::invalid_argument("xattn: line_plot: could not write PNG to '" + path.string() + "'");
}

}  // namespace xattn::viz
