#include <xattn/viz/bitmap_font.hpp>
#include <xattn/viz/canvas.hpp>
#include <xattn/viz/text.hpp>

#include <catch2/catch.hpp>

#include <string>

namespace font = xattn::viz::font;
using xattn::viz::canvas;
using xattn::viz::rgb8;

TEST_CASE("every printable ASCII character has its own glyph", "[viz][font]") {
  for (int a = 33; a < 127; ++a) {
    const auto& ga = font::glyph_for(static_cast<char>(a));
    INFO("character '" << static_cast<char>(a) << "'");
    bool lit = false;
    for (const auto row : ga) {
      CHECK(row < (1u << font::glyph_width));  // nothing outside the 5 columns
      lit = lit || row != 0;
    }
    CHECK(lit);
    for (int b = a + 1; b < 127; ++b) {
      INFO("versus '" << static_cast<char>(b) << "'");
      CHECK(ga != font::glyph_for(static_cast<char>(b)));
    }
  }
  for (const auto row : font::glyph_for(' ')) CHECK(row == 0);
}

TEST_CASE("only descender glyphs reach below the baseline", "[viz][font]") {
  const std::string descenders = "gjpqy,_";
  for (int a = 32; a < 127; ++a) {
    const char ch = static_cast<char>(a);
    const auto& g = font::glyph_for(ch);
    const bool below = g[7] != 0 || g[8] != 0;
    INFO("character '" << ch << "'");
    CHECK(below == (descenders.find(ch) != std::string::npos));
  }
}

TEST_CASE("characters outside printable ASCII draw as '?'", "[viz][font]") {
  CHECK(font::glyph_for('\n') == font::glyph_for('?'));
  CHECK(font::glyph_for(static_cast<char>(0xC3)) == font::glyph_for('?'));
  CHECK(font::glyph_for(static_cast<char>(127)) == font::glyph_for('?'));
}

TEST_CASE("text is measured and drawn at the given scale and direction", "[viz][font]") {
  using xattn::viz::draw_text;
  using xattn::viz::text_direction;
  CHECK(xattn::viz::text_width("", 3) == 0);
  CHECK(xattn::viz::text_width("L", 1) == 5);
  CHECK(xattn::viz::text_width("Keys", 2) == 4 * 12 - 2);
  CHECK(xattn::viz::text_height(2) == 18);

  const rgb8 white{255, 255, 255}, ink{0, 0, 0};
  // 'L': the left column lit on rows 0..6 and the whole of row 6.
  canvas h(20, 20, white);
  draw_text(h, 1, 1, "L", ink, 2);
  CHECK(h.at(1, 1) == ink);
  CHECK(h.at(2, 2) == ink);                  // same 2x2 font pixel
  CHECK(h.at(3, 1) == white);                // column 1, row 0
  CHECK(h.at(1 + 2 * 4, 1 + 2 * 6) == ink);  // column 4, row 6
  CHECK(h.at(1, 1 + 2 * 7) == white);        // row 7 is descender space

  // Rotated counter-clockwise: reading upwards, the glyph's top faces left.
  canvas v(10, 10, white);
  draw_text(v, 0, 0, "L", ink, 1, text_direction::vertical_up);
  for (int y = 0; y < 7; ++y) CHECK(v.at(y, 4) == ink);  // the stem lies along the bottom row
  for (int x = 0; x < 5; ++x) CHECK(v.at(6, x) == ink);  // the foot stands upright at x = 6
  CHECK(v.at(0, 0) == white);
  CHECK(v.at(5, 0) == white);
}

TEST_CASE("drawing clips to the canvas", "[viz][font]") {
  canvas img(4, 4, rgb8{1, 2, 3});
  xattn::viz::draw_text(img, -3, -5, "Wg", rgb8{9, 9, 9}, 3);
  img.fill_rect(2, 2, 100, 100, rgb8{7, 7, 7});
  CHECK(img.at(3, 3) == rgb8{7, 7, 7});
  CHECK(img.at(1, 1) != rgb8{7, 7, 7});
}
