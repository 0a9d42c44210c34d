#pragma once
// Where every part of a heatmap goes, computed before any pixel is drawn so the
// geometry can be tested on its own. All sizes in pixels; with s = text_scale,
// c = cell, a grid of R x C panels of Q queries x K keys:
//
//   text:    advance a = 6s, line height lh = 9s, cap height 7s,
//            width of n chars tw = n*a - s (0 if empty)
//   spacing: margin m = 4s, tick length tl = 2s, tick-to-label gap tg = s
//   panel    pw = K*c, ph = Q*c
//   slot     sw = max(pw, tw(each title), tw(xlabel)), sh = max(ph, tw(ylabel))
//   bands    title tb = titles ? lh + s : 0;   ylabel yb = ylabel ? lh + m : 0
//            xlabel xb = xlabel ? s + lh : 0
//   ticks    xw, yw = tw(label of the last x / y tick)
//   gaps     hgap = 2m + xw/2 (x tick labels may overhang a panel by half a label),
//            vgap = m + lh/2 (y tick labels may overhang by half a line)
//   left     L = m + yb + yw + tg + tl;      top T = m + lh/2
//   grid     gw = C*sw + (C-1)*hgap,         gh = R*(tb + sh) + (R-1)*vgap
//   panel in grid row r, column g at x = L + g*(sw + hgap) + (sw - pw)/2,
//                                    y = T + r*(tb + sh + vgap) + tb + (sh - ph)/2
//   ylabel   rotated, left edge at panel(0, 0).x - tl - tg - yw - m - lh (= m unless the
//            panel is centred in a wider slot), centred on each first-column panel
//   colorbar at x = L + gw + 2m, y = T + tb, width 2a, height gh - tb;
//            right band Rb = 2m + 2a + tl + tg + (widest colorbar label) + m, or m without one
//   bottom   B = tl + tg + lh + xb + m
//   image    width = L + gw + Rb, height = T + gh + B
// Tick steps are the smallest of 1, 2, 5, 10, 20, 50, ... giving at most 6 ticks
// whose labels do not touch (x: step*c >= label width + a; y: step*c >= lh).
// The colorbar is labelled at 2 to 5 evenly spaced values from lo (its bottom
// pixel row) to hi (its top row), as many as fit two lines apart.

#include <xattn/viz/heatmap_options.hpp>
#include <xattn/viz/text.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace xattn::viz {

struct rect {
  int x = 0, y = 0, w = 0, h = 0;
};

struct heatmap_layout {
  int width = 0, height = 0;
  int cell = 0, scale = 0;
  int margin = 0, tick_length = 0, tick_gap = 0;  // m, tl, tg above
  int ylabel_x = 0;                               // left edge of the rotated ylabel
  std::size_t rows = 0, cols = 0, queries = 0, keys = 0;
  std::vector<rect> panels;          // row-major; exactly the cells, queries down and keys across
  std::vector<std::size_t> x_ticks;  // key indices labelled under the bottom row
  std::vector<std::size_t> y_ticks;  // query indices labelled left of the first column
  bool has_colorbar = false;
  rect colorbar;                                       // gradient area, hi at the top
  std::vector<std::pair<double, int>> colorbar_ticks;  // (value, pixel row), lo first

  const rect& panel(std::size_t r, std::size_t c) const { return panels[r * cols + c]; }
};

// The colorbar's number format: 3 significant digits keeps labels short.
inline std::string format_value(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

namespace detail {

// Images beyond this are almost certainly a mistake (a cell size meant for a
// 10-key toy applied to 4096 keys) and would exhaust memory before failing.
inline constexpr long long max_heatmap_pixels = 1LL << 26;
inline constexpr long long max_heatmap_side = 1LL << 16;

inline std::vector<std::size_t> choose_ticks(std::size_t n, long long cell, long long min_spacing_extra,
                                             bool use_label_width, int scale) {
  constexpr std::size_t max_ticks = 6;
  for (std::size_t step = 1;; step *= 10) {
    for (const std::size_t mult : {std::size_t{1}, std::size_t{2}, std::size_t{5}}) {
      const std::size_t s = step * mult;
      const std::size_t count = (n - 1) / s + 1;
      const std::size_t last = (count - 1) * s;
      const long long need = (use_label_width ? text_width(std::to_string(last), scale) : 0) + min_spacing_extra;
      if (count == 1 || (count <= max_ticks && static_cast<long long>(s) * cell >= need)) {
        std::vector<std::size_t> ticks(count);
        for (std::size_t k = 0; k < count; ++k) ticks[k] = k * s;
        return ticks;
      }
    }
  }
}

}  // namespace detail

// Precondition: rows, cols, queries, keys >= 1; lo <= hi, both finite.
inline heatmap_layout make_heatmap_layout(std::size_t rows, std::size_t cols, std::size_t queries, std::size_t keys,
                                          const heatmap_options& opt, double lo, double hi) {
  if (opt.cell < 1 || opt.cell > 1024) {
    throw std::invalid_argument("xattn: heatmap: options.cell must be in [1, 1024], got " + std::to_string(opt.cell));
  }
  if (opt.text_scale < 1 || opt.text_scale > 16) {
    throw std::invalid_argument("xattn: heatmap: options.text_scale must be in [1, 16], got " +
                                std::to_string(opt.text_scale));
  }
  if (!opt.titles.empty() && opt.titles.size() != rows * cols) {
    throw std::invalid_argument("xattn: heatmap: options.titles must be empty or have one entry per panel (" +
                                std::to_string(rows * cols) + "), got " + std::to_string(opt.titles.size()));
  }

  using ll = long long;
  const int s = opt.text_scale;
  const ll c = opt.cell;
  const ll a = font::advance * s, lh = text_height(s);
  const ll m = 4 * s, tl = 2 * s, tg = s;
  const ll nrows = static_cast<ll>(rows), ncols = static_cast<ll>(cols);
  const ll pw = static_cast<ll>(keys) * c, ph = static_cast<ll>(queries) * c;

  heatmap_layout out;
  out.cell = opt.cell;
  out.scale = s;
  out.margin = static_cast<int>(m);
  out.tick_length = static_cast<int>(tl);
  out.tick_gap = static_cast<int>(tg);
  out.rows = rows;
  out.cols = cols;
  out.queries = queries;
  out.keys = keys;
  out.x_ticks = detail::choose_ticks(keys, c, a, true, s);
  out.y_ticks = detail::choose_ticks(queries, c, lh, false, s);

  ll widest_title = 0;
  for (const auto& t : opt.titles) widest_title = std::max<ll>(widest_title, text_width(t, s));
  const ll sw = std::max({pw, widest_title, ll{text_width(opt.xlabel, s)}});
  const ll sh = std::max(ph, ll{text_width(opt.ylabel, s)});
  const ll tb = opt.titles.empty() ? 0 : lh + s;
  const ll yb = opt.ylabel.empty() ? 0 : lh + m;
  const ll xb = opt.xlabel.empty() ? 0 : s + lh;
  const ll xw = text_width(std::to_string(out.x_ticks.back()), s);
  const ll yw = text_width(std::to_string(out.y_ticks.back()), s);
  const ll hgap = 2 * m + xw / 2, vgap = m + lh / 2;
  const ll left = m + yb + yw + tg + tl, top = m + lh / 2;
  const ll gw = ncols * sw + (ncols - 1) * hgap, gh = nrows * (tb + sh) + (nrows - 1) * vgap;
  const ll bottom = tl + tg + lh + xb + m;

  // Colorbar labels need about two lines of spacing; lo == hi gets a single one.
  const ll bar_h = gh - tb;
  const ll intervals = hi > lo ? std::clamp<ll>((bar_h - 1) / (2 * lh), 1, 4) : 0;
  const auto fraction = [intervals](ll k) {
    return intervals == 0 ? 0.0 : static_cast<double>(k) / static_cast<double>(intervals);
  };
  // The top label is hi itself, not lo + (hi - lo) * 1 with its rounding.
  const auto tick_value = [&](ll k) { return k == intervals ? hi : lo + (hi - lo) * fraction(k); };
  ll widest_value = 0;
  for (ll k = 0; opt.colorbar && k <= intervals; ++k) {
    widest_value = std::max<ll>(widest_value, text_width(format_value(tick_value(k)), s));
  }
  const ll right = opt.colorbar ? 2 * m + 2 * a + tl + tg + widest_value + m : m;

  const ll width = left + gw + right, height = top + gh + bottom;
  if (width > detail::max_heatmap_side || height > detail::max_heatmap_side ||
      width * height > detail::max_heatmap_pixels) {
    throw std::invalid_argument("xattn: heatmap: " + std::to_string(rows) + " x " + std::to_string(cols) +
                                " panels of " + std::to_string(queries) + " x " + std::to_string(keys) +
                                " weights with options.cell = " + std::to_string(opt.cell) + " need a " +
                                std::to_string(width) + " x " + std::to_string(height) +
                                " image, over the limit of 2^16 pixels a side and 2^26 in all");
  }
  // Everything below fits in int now.
  const auto i = [](ll v) { return static_cast<int>(v); };
  out.width = i(width);
  out.height = i(height);
  out.panels.reserve(rows * cols);
  for (ll r = 0; r < nrows; ++r) {
    for (ll g = 0; g < ncols; ++g) {
      out.panels.push_back({i(left + g * (sw + hgap) + (sw - pw) / 2),
                            i(top + r * (tb + sh + vgap) + tb + (sh - ph) / 2), i(pw), i(ph)});
    }
  }
  // Beside the tick labels rather than at the margin, so it stays with its panel.
  out.ylabel_x = out.panels.front().x - i(tl + tg + yw + m + lh);
  if (opt.colorbar) {
    out.has_colorbar = true;
    out.colorbar = {i(left + gw + 2 * m), i(top + tb), i(2 * a), i(bar_h)};
    for (ll k = 0; k <= intervals; ++k) {
      const ll up = std::llround(fraction(k) * static_cast<double>(bar_h - 1));
      out.colorbar_ticks.emplace_back(tick_value(k), i(top + tb + bar_h - 1 - up));
    }
  }
  return out;
}

}  // namespace xattn::viz
