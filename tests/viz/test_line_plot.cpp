// Line plots: a falling series is drawn from the plot's top-left to its bottom-right in its colour,
// log scale maps decades evenly, and bad series are refused by name.
#include <xattn/viz/line_plot.hpp>

#include <catch2/catch.hpp>

#include <stdexcept>

using namespace xattn::viz;

namespace {
constexpr rgb8 blue{31, 119, 180};  // the first series' colour
bool is_blue(const canvas& img, int x, int y) {
  const rgb8 c = img.at(x, y);
  return c.r == blue.r && c.g == blue.g && c.b == blue.b;
}
/// Whether any pixel of column x, rows [y0, y1), has the first series' colour.
bool column_has_blue(const canvas& img, int x, int y0, int y1) {
  for (int y = y0; y < y1; ++y)
    if (is_blue(img, x, y)) return true;
  return false;
}
}  // namespace

TEST_CASE("line plot: a falling loss runs from the top-left to the bottom-right of the axes") {
  line_plot_options o;  // 640 x 400, axes from x = 110 to 620, y = 20 to 350
  const canvas img = render_line_plot({{"loss", {4.0, 3.0, 2.0, 1.0}}}, o);
  REQUIRE(img.width() == 640);
  REQUIRE(img.height() == 400);
  CHECK(column_has_blue(img, 112, 18, 26));    // first point: the top of the y range
  CHECK(column_has_blue(img, 618, 344, 352));  // last point: the bottom
  CHECK_FALSE(column_has_blue(img, 618, 18, 100));
  // the middle of the x range is at the middle of the y range (a straight line)
  CHECK(column_has_blue(img, 365, 180, 190));
}

TEST_CASE("line plot: log_y puts 1, 10, 100 at evenly spaced heights") {
  line_plot_options o;
  o.log_y = true;
  const canvas img = render_line_plot({{"x", {100.0, 10.0, 1.0}}}, o);
  CHECK(column_has_blue(img, 365, 180, 190));  // 10: halfway between 100 (top) and 1 (bottom)
}

TEST_CASE("line plot: refuses empty, non-finite and (log scale) non-positive series by name") {
  CHECK_THROWS_AS(render_line_plot({}), std::invalid_argument);
  CHECK_THROWS_WITH(render_line_plot({{"loss", {}}}), Catch::Contains("series 'loss' is empty"));
  CHECK_THROWS_WITH(render_line_plot({{"loss", {1.0, NAN}}}), Catch::Contains("series 'loss' has the value nan"));
  line_plot_options o;
  o.log_y = true;
  CHECK_THROWS_WITH(render_line_plot({{"w", {1.0, 0.0}}}, o), Catch::Contains("log_y needs finite values > 0"));
}
