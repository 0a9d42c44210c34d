#include <xattn/viz/colormap.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>

using xattn::viz::rgb8;
using xattn::viz::viridis;

namespace {

double srgb_to_linear(double x) { return x <= 0.04045 ? x / 12.92 : std::pow((x + 0.055) / 1.055, 2.4); }

// Relative luminance of an sRGB colour with channels in [0, 1] (Rec. 709 weights).
double luminance(double r, double g, double b) {
  return 0.2126 * srgb_to_linear(r) + 0.7152 * srgb_to_linear(g) + 0.0722 * srgb_to_linear(b);
}

double luminance(rgb8 c) { return luminance(c.r / 255.0, c.g / 255.0, c.b / 255.0); }

}  // namespace

TEST_CASE("viridis runs from dark purple to yellow", "[viz][colormap]") {
  // The published end colours #440154 and #fde725.
  CHECK(viridis(0.0) == rgb8{68, 1, 84});
  CHECK(viridis(1.0) == rgb8{253, 231, 37});
  const rgb8 lo = viridis(0.0), hi = viridis(1.0);
  CHECK((lo.b > lo.g && lo.r > lo.g && luminance(lo) < 0.05));             // dark, red + blue: purple
  CHECK((hi.r > 200 && hi.g > 200 && hi.b < 64 && luminance(hi) > 0.75));  // bright, red + green: yellow
  // The midpoint, #21918c in the published map, within the anchors' rounding.
  const rgb8 mid = viridis(0.5);
  CHECK(std::abs(mid.r - 33) <= 1);
  CHECK(std::abs(mid.g - 145) <= 1);
  CHECK(std::abs(mid.b - 140) <= 1);
}

TEST_CASE("viridis luminance rises monotonically", "[viz][colormap]") {
  // Strictly, before rounding to bytes: the anchors, hence their interpolation.
  const auto& anchors = xattn::viz::detail::viridis_anchors;
  for (std::size_t k = 1; k < anchors.size(); ++k) {
    const auto& a = anchors[k - 1];
    const auto& b = anchors[k];
    CHECK(luminance(b[0], b[1], b[2]) > luminance(a[0], a[1], a[2]));
  }
  // After rounding to bytes, neighbouring samples may dip by at most what one
  // level on each channel is worth (even matplotlib's 8-bit viridis table dips).
  const int n = 4096;
  rgb8 prev = viridis(0.0);
  for (int k = 1; k <= n; ++k) {
    const double t = static_cast<double>(k) / n;
    const rgb8 c = viridis(t);
    const double one_level = luminance((c.r + 1) / 255.0, (c.g + 1) / 255.0, (c.b + 1) / 255.0) - luminance(c);
    INFO("t = " << t);
    REQUIRE(luminance(c) >= luminance(prev) - one_level);
    prev = c;
  }
  // Coarser steps are strictly brighter.
  for (int k = 1; k <= 64; ++k) CHECK(luminance(viridis(k / 64.0)) > luminance(viridis((k - 1) / 64.0)));
}

TEST_CASE("viridis clamps out-of-range input", "[viz][colormap]") {
  CHECK(viridis(-0.5) == viridis(0.0));
  CHECK(viridis(7.0) == viridis(1.0));
  CHECK(viridis(std::numeric_limits<double>::quiet_NaN()) == viridis(0.0));
  CHECK(viridis(std::numeric_limits<double>::infinity()) == viridis(1.0));
}
