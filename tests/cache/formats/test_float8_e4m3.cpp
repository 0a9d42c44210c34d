// float8_e4m3 pages: the codes against the OCP specification's definitions (every code's value,
// the nearest code by trying them all, ties to even, saturation), a batch decoded in registers
// equal to value() lane by lane, and a group's scale and error bound.
#include "support/float8_reference.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xattn/cache.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

using namespace xattn;
using testing::e4m3_nearest;
using testing::e4m3_value;

TEST_CASE("float8_e4m3: every code decodes to the value the OCP specification gives it", "[cache][fp8]") {
  for (unsigned c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN, never stored
    INFO("code 0x" << std::hex << c);
    CHECK(double(float(std::bit_cast<float8_e4m3>(std::uint8_t(c)))) == e4m3_value(c));
  }
  CHECK(float8_e4m3::decode(0x7e) == 448.0f);
  CHECK(float8_e4m3::decode(0x38) == 1.0f);
  CHECK(float8_e4m3::decode(0x08) == 0x1p-6f);  // the smallest normal
  CHECK(float8_e4m3::decode(0x01) == 0x1p-9f);  // the smallest subnormal
  CHECK(float8_e4m3::decode(0xfe) == -448.0f);
}

TEST_CASE("float8_e4m3: conversion rounds to the nearest code, ties to even, and saturates", "[cache][fp8]") {
  // each code, the midpoints between neighbours (ties), and just either side of them
  for (unsigned c = 0; c < 0x7e; ++c) {
    const float lo = float(e4m3_value(c)), hi = float(e4m3_value(c + 1)), mid = (lo + hi) / 2;
    REQUIRE(double(mid) == (e4m3_value(c) + e4m3_value(c + 1)) / 2);  // the tie is a float
    for (const float y : {lo, mid, std::nextafter(mid, lo), std::nextafter(mid, hi), hi})
      for (const float x : {y, -y}) {
        INFO("x = " << x);
        CHECK(unsigned(float8_e4m3::encode(x)) == e4m3_nearest(x));
      }
  }
  testing::rng r(8);
  for (int i = 0; i < 100000; ++i) {  // magnitudes from 2^-12 to 2^10
    const float x = float((r.uniform(0, 1) < 0.5 ? -1 : 1) * std::exp2(r.uniform(-12, 10)));
    INFO("x = " << x);
    REQUIRE(unsigned(float8_e4m3::encode(x)) == e4m3_nearest(x));
  }
  CHECK(float8_e4m3::encode(1e6f) == 0x7e);
  CHECK(float8_e4m3::encode(-460.0f) == 0xfe);
  CHECK(float8_e4m3::encode(0.0f) == 0x00);
  CHECK(float8_e4m3::encode(-0.0f) == 0x80);
  CHECK(float8_e4m3::encode(0x1p-11f) == 0x00);  // below half the smallest subnormal: zero
}

TEST_CASE("float8_e4m3: a row's batches decode in registers as value() does, lane by lane", "[cache][fp8]") {
  using F = cache_format<float8_e4m3>;
  constexpr std::size_t w = simd::width<float>;
  std::vector<float8_e4m3> codes(256 + 64);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = std::bit_cast<float8_e4m3>(std::uint8_t((i * 37) % 256));
  for (auto& c : codes)
    if ((c.bits & 0x7f) == 0x7f) c.bits = 0x15;  // no NaN codes: they are never stored
  std::vector<float> scales(codes.size() / F::group);
  for (std::size_t g = 0; g < scales.size(); ++g) scales[g] = std::ldexp(1.0f + 0.1f * float(g), int(g) * 7 - 30);
  for (std::size_t col = 0; col + w <= 256; col += 3) {  // on a batch boundary (in registers) and off it
    INFO("from feature " << col);
    const kernel::scaled_row<F> row{codes.data(), scales.data(), col};
    alignas(64) float got[w];
    simd::load_as<float>(row).store_aligned(got);
    for (std::size_t i = 0; i < w; ++i) {
      const std::size_t d = col + i;
      REQUIRE(got[i] == F::value(codes[d], scales[d / F::group]));
      REQUIRE(double(got[i]) == double(float(e4m3_value(codes[d].bits) * scales[d / F::group])));
    }
  }
}

TEST_CASE("float8_e4m3: a group's largest feature is ±448 · scale, every feature within half a step", "[cache][fp8]") {
  using F = cache_format<float8_e4m3>;
  testing::rng r(9);
  std::vector<float> x(40);
  for (auto& v : x) v = float(r.uniform(-3, 3));
  x[5] = -7.5f;  // the group's largest magnitude
  float8_e4m3 out[32];
  const float s = F::quantize(x.data(), 1, 32, out);
  CHECK(s == 7.5f / 448.0f);
  CHECK(F::value(out[5], s) == -7.5f);
  for (std::size_t d = 0; d < 32; ++d) {
    INFO("feature " << d);
    CHECK(out[d].bits == e4m3_nearest(x[d] * (1.0f / s)));
    // half a step: 2^-4 of the value for normal codes, 2^-10 · scale below 2^-6 · scale
    CHECK(std::abs(F::value(out[d], s) - x[d]) <= std::abs(x[d]) / 16 + s * 0x1p-10f);
  }
  // a strided group of 8 (a head size's last, partial group)
  const float s8 = F::quantize(x.data() + 1, 4, 8, out);
  float amax = 0;
  for (std::size_t d = 0; d < 8; ++d) amax = std::max(amax, std::abs(x[1 + 4 * d]));
  CHECK(s8 == amax / 448.0f);
}
