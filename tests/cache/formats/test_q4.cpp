// q4 pages (llama.cpp's q4_0): a group's codes against q4_0's definition, the nibble layout, a
// batch decoded in registers equal to value_at lane by lane, and a group's error bound.
#include "support/q4_reference.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xattn/cache.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

using namespace xattn;

TEST_CASE("q4: a group's codes are q4_0's, two to a byte, features j and j + 16 in byte j", "[cache][q4]") {
  using F = cache_format<q4>;
  testing::rng r(4);
  std::vector<float> x(64);
  for (auto& v : x) v = float(r.uniform(-3, 3));
  x[7] = 6.5f;    // the group's largest magnitude, positive: d = -6.5 / 8 < 0
  x[20] = -6.4f;  // beyond 7.5 · |d| on the other side: code 15, 7 · d
  q4 out[16];
  const float s = F::quantize(x.data(), 1, 32, out);
  CHECK(s == 6.5f / -8.0f);
  CHECK(F::value_at(out, 7, s) == 6.5f);  // code 0: -8 · d
  CHECK(F::value_at(out, 20, s) == 7 * s);
  for (std::size_t j = 0; j < 16; ++j) {
    INFO("byte " << j);
    CHECK(unsigned(out[j].bits & 15) == testing::q4_0_code(x[j], 1 / s));
    CHECK(unsigned(out[j].bits >> 4) == testing::q4_0_code(x[j + 16], 1 / s));
  }
  for (std::size_t d = 0; d < 32; ++d) {
    INFO("feature " << d);
    // half a step, except the far end of the range: codes stop at 15 (7 · d) on the side opposite m
    const float err = std::abs(F::value_at(out, d, s) - x[d]);
    CHECK(err <=
          std::abs(s) / 2 * (1 + 1e-6f) + (x[d] * s > 0 && std::abs(x[d]) > 7.5f * std::abs(s) ? std::abs(s) : 0));
  }
  // a strided group of 8 (a head size's last, partial group): the missing features are code 8, zero
  const float s8 = F::quantize(x.data() + 1, 4, 8, out);
  float amax = 0, m = 0;
  for (std::size_t d = 0; d < 8; ++d)
    if (amax < std::abs(x[1 + 4 * d])) amax = std::abs(x[1 + 4 * d]), m = x[1 + 4 * d];
  CHECK(s8 == m / -8.0f);
  for (std::size_t d = 8; d < 32; ++d) CHECK(F::value_at(out, d, s8) == 0.0f);
  // an all-zero group: scale 0, every code 8
  std::vector<float> zeros(32, 0.0f);
  CHECK(F::quantize(zeros.data(), 1, 32, out) == 0.0f);
  for (std::size_t j = 0; j < 16; ++j) CHECK(out[j].bits == 0x88);
}

TEST_CASE("q4: a row's batches decode in registers as value_at does, lane by lane", "[cache][q4]") {
  using F = cache_format<q4>;
  constexpr std::size_t w = simd::width<float>;
  std::vector<q4> codes(128 + 32);  // 256 features and some
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i].bits = std::uint8_t((i * 37 + 11) % 256);
  std::vector<float> scales(codes.size() * 2 / F::group);
  for (std::size_t g = 0; g < scales.size(); ++g) scales[g] = std::ldexp(g % 2 ? -1.3f : 1.1f, int(g) * 5 - 20);
  for (std::size_t col = 0; col + w <= 256; col += 3) {  // on a batch boundary (in registers) and off it
    INFO("from feature " << col);
    const kernel::scaled_row<F> row{codes.data(), scales.data(), col};
    alignas(64) float got[w];
    simd::load_as<float>(row).store_aligned(got);
    for (std::size_t i = 0; i < w; ++i) {
      const std::size_t d = col + i, g = d / 32, o = d % 32;
      const unsigned c = (codes[g * 16 + o % 16].bits >> (o / 16 * 4)) & 15u;
      REQUIRE(got[i] == F::value_at(codes.data(), d, scales[g]));
      REQUIRE(got[i] == float(int(c) - 8) * scales[g]);
    }
  }
}
