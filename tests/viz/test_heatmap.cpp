#include <xattn/viz/heatmap.hpp>

#include <stb/stb_image.h>
#include <catch2/catch.hpp>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using xattn::viz::heatmap_options;
using xattn::viz::rect;
using xattn::viz::rgb8;
using xattn::viz::viridis;

namespace {

// A PNG read back through stb_image, so tests see what a viewer would.
struct decoded {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;

  rgb8 at(int x, int y) const {
    const auto o =
        (static_cast<std::size_t>(y) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x)) * std::size_t{3};
    return {rgb[o], rgb[o + 1], rgb[o + 2]};
  }
};

decoded read_png(const std::string& path) {
  int w = 0, h = 0, comp = 0;
  std::unique_ptr<unsigned char, void (*)(void*)> px(stbi_load(path.c_str(), &w, &h, &comp, 3), stbi_image_free);
  REQUIRE(px != nullptr);
  decoded d{w, h, {}};
  d.rgb.assign(px.get(), px.get() + static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * 3);
  return d;
}

// Every cell's centre pixel must be the colormap of its normalised weight.
// Image: a decoded PNG or a canvas straight from render_heatmap.
template <class Image, class F>
void check_cells(const Image& img, const rect& panel, int cell, std::size_t q, std::size_t k, F expected) {
  for (std::size_t i = 0; i < q; ++i) {
    for (std::size_t j = 0; j < k; ++j) {
      const int x = panel.x + static_cast<int>(j) * cell + cell / 2;
      const int y = panel.y + static_cast<int>(i) * cell + cell / 2;
      INFO("cell (" << i << ", " << j << ") at pixel (" << x << ", " << y << ")");
      REQUIRE(img.at(x, y) == expected(i, j));
    }
  }
}

// Smallest rectangle holding every pixel of colour c left of column x_end.
rect bounding_box(const decoded& img, rgb8 c, int x_end) {
  int x0 = img.width, y0 = img.height, x1 = -1, y1 = -1;
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < x_end; ++x) {
      if (img.at(x, y) != c) continue;
      x0 = std::min(x0, x);
      y0 = std::min(y0, y);
      x1 = std::max(x1, x);
      y1 = std::max(y1, y);
    }
  }
  return {x0, y0, x1 - x0 + 1, y1 - y0 + 1};
}

bool same(const rect& a, const rect& b) { return a.x == b.x && a.y == b.y && a.w == b.w && a.h == b.h; }

bool has_ink(const decoded& img, int x, int y, int w, int h) {
  for (int yy = y; yy < y + h; ++yy) {
    for (int xx = x; xx < x + w; ++xx) {
      if (img.at(xx, yy) == rgb8{34, 34, 34}) return true;
    }
  }
  return false;
}

}  // namespace

TEST_CASE("a 4 x 6 gradient renders each cell in its colour", "[viz][heatmap]") {
  xt::xtensor<double, 2> w({4, 6});
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t j = 0; j < 6; ++j) w(i, j) = static_cast<double>(i * 6 + j) / 23.0;
  }
  xattn::viz::write_heatmap("gradient_4x6.png", w);  // default options
  const decoded img = read_png("gradient_4x6.png");

  // The layout formula (heatmap_layout.hpp) worked by hand for s = 2, c = 16:
  // a = 12, lh = 18, m = 8, tl = 4, tg = 2; pw = 96, ph = 64;
  // sw = max(96, tw("Keys") = 46) = 96, sh = max(64, tw("Queries") = 82) = 82;
  // x ticks 0 2 4 (step 1 would need 16 >= 10 + 12), y ticks 0 2 (16 < lh) -> xw = yw = 10;
  // L = 8 + (18 + 8) + 10 + 2 + 4 = 50, T = 8 + 9 = 17, gw = 96, gh = 82;
  // colorbar: (82 - 1) / 36 = 2 intervals -> labels 0 0.5 1, widest 34,
  // Rb = 16 + 24 + 4 + 2 + 34 + 8 = 88; B = 4 + 2 + 18 + 20 + 8 = 52.
  CHECK(img.width == 50 + 96 + 88);
  CHECK(img.height == 17 + 82 + 52);
  const rect panel{50, 17 + (82 - 64) / 2, 96, 64};

  const auto lay = xattn::viz::make_heatmap_layout(1, 1, 4, 6, heatmap_options{}, 0.0, 1.0);
  CHECK(lay.width == img.width);
  CHECK(lay.height == img.height);
  CHECK(same(lay.panel(0, 0), panel));
  CHECK(lay.x_ticks == std::vector<std::size_t>{0, 2, 4});
  CHECK(lay.y_ticks == std::vector<std::size_t>{0, 2});

  check_cells(img, panel, 16, 4, 6, [&](std::size_t i, std::size_t j) { return viridis(w(i, j)); });
  // Exact: the whole cell is one colour, edges included.
  CHECK(img.at(panel.x, panel.y) == viridis(0.0));
  CHECK(img.at(panel.x + panel.w - 1, panel.y + panel.h - 1) == viridis(1.0));

  // The colorbar runs from hi at its top row to lo at its bottom row.
  REQUIRE(lay.has_colorbar);
  const rect& bar = lay.colorbar;
  CHECK(same(bar, rect{50 + 96 + 16, 17, 24, 82}));
  CHECK(img.at(bar.x + bar.w / 2, bar.y) == viridis(1.0));
  CHECK(img.at(bar.x + bar.w / 2, bar.y + bar.h - 1) == viridis(0.0));
  REQUIRE(lay.colorbar_ticks.size() == 3);
  CHECK(lay.colorbar_ticks[1].first == 0.5);
  // The middle tick sits on the pixel row nearest to 0.5: row 40 of 0..81 shows t = 41/81.
  CHECK(lay.colorbar_ticks[1].second == bar.y + 40);
  CHECK(img.at(bar.x + 1, bar.y + 40) == viridis(41.0 / 81.0));

  // Labels are there: tick digits under the panel, rotated ylabel on the left.
  CHECK(has_ink(img, panel.x, panel.y + panel.h + 4 + 2, panel.w, 14));
  CHECK(has_ink(img, 8, panel.y, 18, panel.h));
}

TEST_CASE("a rank-4 input becomes a grid with panels in row-major places", "[viz][heatmap]") {
  // Panel (r, g) holds the constant (2r + g) / 3 on a fixed [0, 1] scale, so
  // each panel has its own colour and can be found in the image by colour alone.
  xt::xtensor<double, 4> w({2, 2, 3, 5});
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t g = 0; g < 2; ++g) xt::view(w, r, g) = static_cast<double>(2 * r + g) / 3.0;
  }
  heatmap_options opt;
  opt.cell = 10;
  opt.text_scale = 1;
  opt.xlabel = "k";
  opt.ylabel = "q";
  opt.titles = {"a", "b", "c", "d"};
  opt.range = {{0.0, 1.0}};
  xattn::viz::write_heatmap("grid_2x2.png", w, opt);
  const decoded img = read_png("grid_2x2.png");

  // By hand for s = 1, c = 10: a = 6, lh = 9, m = 4, tl = 2, tg = 1; pw = 50, ph = 30;
  // sw = 50, sh = 30, tb = 10, yb = 13, xb = 10; x ticks 0 2 4 (xw = 5), y ticks 0 1 2 (yw = 5);
  // hgap = 8 + 2 = 10, vgap = 4 + 4 = 8; L = 4 + 13 + 5 + 1 + 2 = 25, T = 8;
  // gw = 2 * 50 + 10 = 110, gh = 2 * (10 + 30) + 8 = 88;
  // colorbar height 78 -> 4 intervals, widest label "0.25" = 23, Rb = 8 + 12 + 2 + 1 + 23 + 4 = 50;
  // B = 2 + 1 + 9 + 10 + 4 = 26.
  CHECK(img.width == 25 + 110 + 50);
  CHECK(img.height == 8 + 88 + 26);
  const rect expected[2][2] = {{{25, 18, 50, 30}, {85, 18, 50, 30}}, {{25, 66, 50, 30}, {85, 66, 50, 30}}};
  const auto lay = xattn::viz::make_heatmap_layout(2, 2, 3, 5, opt, 0.0, 1.0);
  REQUIRE(lay.has_colorbar);
  CHECK(same(lay.colorbar, rect{143, 18, 12, 78}));

  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t g = 0; g < 2; ++g) {
      INFO("panel (" << r << ", " << g << ")");
      const rect& e = expected[r][g];
      CHECK(same(lay.panel(r, g), e));
      const rgb8 colour = viridis(static_cast<double>(2 * r + g) / 3.0);
      // Found by colour, left of the colorbar: exactly the panel's cells, nowhere else.
      CHECK(same(bounding_box(img, colour, lay.colorbar.x - 1), e));
      check_cells(img, e, 10, 3, 5, [&](std::size_t, std::size_t) { return colour; });
      CHECK(has_ink(img, e.x, e.y - 10, e.w, 9));  // its title
    }
  }
  // Tick labels only on the outer panels: under the bottom row, left of the first column.
  CHECK(has_ink(img, 25, 66 + 30 + 3, 50, 9));
  CHECK_FALSE(has_ink(img, 25, 18 + 30 + 3, 50, 5));
  CHECK(has_ink(img, 25 - 3 - 5, 18, 5, 30));
  CHECK_FALSE(has_ink(img, 85 - 3 - 5, 18, 5, 30));
}

TEST_CASE("a rank-3 input becomes one row of panels; lazy expressions work", "[viz][heatmap]") {
  const auto eye = xt::eye<double>(5);  // an unevaluated generator
  xt::xtensor<double, 3> w({2, 5, 5});
  xt::view(w, 0) = eye;
  xt::view(w, 1) = xt::flip(xt::xtensor<double, 2>(eye), 1);  // flip needs stored data
  heatmap_options opt;
  opt.titles = {"identity", "anti-identity"};
  xattn::viz::write_heatmap("identity.png", w, opt);
  const decoded img = read_png("identity.png");

  const auto lay = xattn::viz::make_heatmap_layout(1, 2, 5, 5, opt, 0.0, 1.0);
  REQUIRE((img.width == lay.width && img.height == lay.height));
  CHECK(lay.panel(0, 1).y == lay.panel(0, 0).y);
  CHECK(lay.panel(0, 1).x > lay.panel(0, 0).x + lay.panel(0, 0).w);
  check_cells(img, lay.panel(0, 0), 16, 5, 5, [](std::size_t i, std::size_t j) { return viridis(i == j); });
  check_cells(img, lay.panel(0, 1), 16, 5, 5, [](std::size_t i, std::size_t j) { return viridis(i + j == 4); });
  // The titles widen the slots, so panels sit centred in them and the rotated
  // ylabel moves right with its panel: just left of the y tick labels (yw = 10).
  const rect& p0 = lay.panel(0, 0);
  CHECK(p0.x == 50 + (154 - 80) / 2);  // slot = tw("anti-identity") = 154, pw = 80
  CHECK(lay.ylabel_x == p0.x - 4 - 2 - 10 - 8 - 18);
  CHECK(has_ink(img, lay.ylabel_x, p0.y, 18, p0.h));
  CHECK_FALSE(has_ink(img, 0, 0, lay.ylabel_x, img.height));

  xattn::viz::write_heatmap("identity_rank2.png", eye);  // rank 2 straight from the generator
  const decoded single = read_png("identity_rank2.png");
  const auto lay1 = xattn::viz::make_heatmap_layout(1, 1, 5, 5, heatmap_options{}, 0.0, 1.0);
  check_cells(single, lay1.panel(0, 0), 16, 5, 5, [](std::size_t i, std::size_t j) { return viridis(i == j); });
}

TEST_CASE("the value range defaults to the data and can be fixed", "[viz][heatmap]") {
  const xt::xarray<double> w = {{2.0, 4.0}, {6.0, 10.0}};
  const auto auto_img = xattn::viz::render_heatmap(w);  // [2, 10]
  const auto lay = xattn::viz::make_heatmap_layout(1, 1, 2, 2, heatmap_options{}, 2.0, 10.0);
  check_cells(auto_img, lay.panel(0, 0), 16, 2, 2,
              [&](std::size_t i, std::size_t j) { return viridis((w(i, j) - 2) / 8); });

  heatmap_options fixed;
  fixed.range = {{0.0, 20.0}};
  fixed.colorbar = false;
  const auto fixed_img = xattn::viz::render_heatmap(w, fixed);
  const auto flay = xattn::viz::make_heatmap_layout(1, 1, 2, 2, fixed, 0.0, 20.0);
  CHECK(fixed_img.width() == flay.width);
  CHECK_FALSE(flay.has_colorbar);
  // Without a colorbar the right band is just the margin m = 8: L = 50 as in the
  // gradient test, and the slot is as wide as "Keys" (46 > pw = 32), panel centred in it.
  CHECK(flay.width == 50 + 46 + 8);
  CHECK(flay.panel(0, 0).x == 50 + (46 - 32) / 2);
  const rect& p = flay.panel(0, 0);
  CHECK(fixed_img.at(p.x + 24, p.y + 24) == viridis(0.5));  // w = 10 of [0, 20]

  // Constant data: lo == hi maps everything to the bottom colour; one colorbar label.
  const xt::xarray<double> flat = xt::ones<double>({3, 3}) * 0.25;
  const auto flat_img = xattn::viz::render_heatmap(flat);
  const auto flay2 = xattn::viz::make_heatmap_layout(1, 1, 3, 3, heatmap_options{}, 0.25, 0.25);
  CHECK(flat_img.at(flay2.panel(0, 0).x + 8, flay2.panel(0, 0).y + 8) == viridis(0.0));
  CHECK(flay2.colorbar_ticks.size() == 1);
}

TEST_CASE("bad input throws std::invalid_argument saying what is wrong", "[viz][heatmap]") {
  using Catch::Matchers::Contains;
  std::filesystem::remove("never_written.png");
  const auto write = [](const auto& w, const heatmap_options& o = {}) {
    xattn::viz::write_heatmap("never_written.png", w, o);
  };
  const auto nan = std::numeric_limits<double>::quiet_NaN();
  const auto inf = std::numeric_limits<double>::infinity();

  CHECK_THROWS_WITH(write(xt::xarray<double>{1.0, 2.0, 3.0}),
                    Contains("weights must have rank 2") && Contains("got shape (3)"));
  CHECK_THROWS_WITH(write(xt::zeros<double>({1, 1, 1, 2, 2})), Contains("rank") && Contains("(1,1,1,2,2)"));
  CHECK_THROWS_WITH(write(xt::xarray<double>::from_shape({0, 4})),
                    Contains("weights must not be empty, got shape (0,4)"));
  CHECK_THROWS_WITH(write(xt::xtensor<double, 3>::from_shape({2, 3, 0})), Contains("empty") && Contains("(2,3,0)"));

  xt::xarray<double> w = xt::zeros<double>({2, 3, 4});
  w(1, 2, 3) = nan;
  CHECK_THROWS_WITH(write(w), Contains("weights must be finite, got nan at index (1,2,3) of shape (2,3,4)"));
  w(1, 2, 3) = 0.0;
  w(0, 1, 0) = -inf;
  CHECK_THROWS_WITH(write(w), Contains("-inf at index (0,1,0)"));
  w(0, 1, 0) = 0.0;

  heatmap_options o;
  o.range = {{1.0, 0.0}};
  CHECK_THROWS_WITH(write(w, o), Contains("options.range") && Contains("{1, 0}"));
  o.range = {{0.0, inf}};
  CHECK_THROWS_WITH(write(w, o), Contains("options.range"));
  o = {};
  o.titles = {"only one"};
  CHECK_THROWS_WITH(write(w, o), Contains("options.titles") && Contains("(2), got 1"));
  o = {};
  o.cell = 0;
  CHECK_THROWS_WITH(write(w, o), Contains("options.cell"));
  o = {};
  o.text_scale = 0;
  CHECK_THROWS_WITH(write(w, o), Contains("options.text_scale"));
  CHECK_THROWS_WITH(write(xt::zeros<double>({1, 5000})), Contains("5000") && Contains("limit"));
  CHECK_FALSE(std::filesystem::exists("never_written.png"));
}

TEST_CASE("a failed write names the path", "[viz][heatmap]") {
  using Catch::Matchers::Equals;
  const std::string path = "no_such_directory/heatmap.png";
  CHECK_THROWS_AS(xattn::viz::write_heatmap(path, xt::eye<double>(3)), std::invalid_argument);
  CHECK_THROWS_WITH(xattn::viz::write_heatmap(path, xt::eye<double>(3)),
                    Equals("xattn: heatmap: could not write PNG to 'no_such_directory/heatmap.png'"));
}

TEST_CASE("a 2 x 2 grid of softmax-like attention, kept for viewing", "[viz][heatmap]") {
  // Row-stochastic weights peaked near key j = i + shift, sharper in later panels.
  const std::size_t q = 8, k = 10;
  xt::xtensor<double, 4> w({2, 2, q, k});
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t g = 0; g < 2; ++g) {
      const double width = 3.0 / static_cast<double>(1 + 2 * r + g), shift = static_cast<double>(g);
      for (std::size_t i = 0; i < q; ++i) {
        double sum = 0;
        for (std::size_t j = 0; j < k; ++j) {
          const double d = (static_cast<double>(j) - static_cast<double>(i) - shift) / width;
          sum += w(r, g, i, j) = std::exp(-d * d);
        }
        for (std::size_t j = 0; j < k; ++j) w(r, g, i, j) /= sum;
      }
    }
  }
  heatmap_options opt;
  opt.titles = {"Layer 0, head 0", "Layer 0, head 1", "Layer 1, head 0", "Layer 1, head 1"};
  opt.range = {{0.0, 1.0}};
  xattn::viz::write_heatmap("attention_2x2.png", w, opt);
  const decoded img = read_png("attention_2x2.png");
  const auto lay = xattn::viz::make_heatmap_layout(2, 2, q, k, opt, 0.0, 1.0);
  REQUIRE((img.width == lay.width && img.height == lay.height));
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t g = 0; g < 2; ++g) {
      check_cells(img, lay.panel(r, g), 16, q, k, [&](std::size_t i, std::size_t j) { return viridis(w(r, g, i, j)); });
    }
  }
}
