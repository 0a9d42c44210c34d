// q4c pages (keys quantized per channel over a page, KIVI): a page's codes and parameters against
// KIVI's definition, the error bound of half a channel's step, a row's batches decoded in registers
// as value_at, and the nibble layout shared with q4.
#include "support/q4c_reference.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xattn/cache.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

using namespace xattn;

TEST_CASE("q4c: a page's rows decode as KIVI's per-channel quantization, within half a channel's step",
          "[cache][q4c]") {
  using F = cache_format<q4c>;
  testing::rng r(14);
  const std::size_t dim = 80, n = 13, row_codes = 48;  // 80 features: three groups, the last partial
  xt::xtensor<float, 3> x = r.tensor<float>({1, n, dim}, -2, 2);
  for (std::size_t t = 0; t < n; ++t) x(0, t, 5) = 40 + float(t);  // a channel far from zero, on every token
  for (std::size_t t = 0; t < n; ++t) x(0, t, 9) = 0.25f;          // a constant channel: scale 0, exact
  std::vector<q4c> codes(n * row_codes);
  std::vector<float> param(F::parameters(dim));
  REQUIRE(param.size() == 3 * 64);
  F::quantize_page(x.data(), n, dim, codes.data(), row_codes, param.data());
  const auto want = testing::q4c_rows(x, 16);
  for (std::size_t d = 0; d < dim; ++d) {
    INFO("feature " << d);
    float lo = x(0, 0, d), hi = x(0, 0, d);
    for (std::size_t t = 0; t < n; ++t) lo = std::min(lo, x(0, t, d)), hi = std::max(hi, x(0, t, d));
    CHECK(param[F::min_at(d)] == lo);
    CHECK(param[F::scale_at(d)] == (hi - lo) / 15);
    for (std::size_t t = 0; t < n; ++t) {
      const float got = F::value_at(codes.data() + t * row_codes, d, param.data()), expected = want(0, t, d);
      const float err = std::abs(got - x(0, t, d)), half_step = (hi - lo) / 30 * (1 + 1e-5f) + 1e-5f;
      REQUIRE(got == expected);
      REQUIRE(err <= half_step);
    }
  }
  CHECK(F::value_at(codes.data(), 9, param.data()) == 0.25f);
  CHECK(F::value_at(codes.data(), 5, param.data()) == 40.0f);  // the minimum: code 0
  for (std::size_t d = dim; d < 96; ++d) CHECK(F::value_at(codes.data(), d, param.data()) == 0.0f);  // padding
  // features j and j + 16 of a group share byte j: its low and high nibbles
  const float s0 = param[F::scale_at(0)], s16 = param[F::scale_at(16)];
  const auto code = [&](std::size_t d) { return std::lround((want(0, 0, d) - param[F::min_at(d)]) / (d ? s16 : s0)); };
  CHECK(long(codes[0].bits & 15) == code(0));
  CHECK(long(codes[0].bits >> 4) == code(16));
}

TEST_CASE("q4c: a row's batches decode in registers as value_at does, lane by lane", "[cache][q4c]") {
  using F = cache_format<q4c>;
  constexpr std::size_t w = simd::width<float>;
  std::vector<q4c> codes(128);  // a row of 256 features
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i].bits = std::uint8_t((i * 37 + 11) % 256);
  std::vector<float> param(F::parameters(256));
  for (std::size_t i = 0; i < param.size(); ++i) param[i] = std::ldexp(i % 3 ? -1.3f : 1.1f, int(i % 40) - 20);
  for (std::size_t col = 0; col + w <= 256; col += 3) {  // on a batch boundary (in registers) and off it
    INFO("from feature " << col);
    const auto row = F::row(codes.data(), param.data(), col, {});
    alignas(64) float got[w];
    simd::load_as<float>(row).store_aligned(got);
    for (std::size_t i = 0; i < w; ++i) {
      const std::size_t d = col + i, g = d / 32, o = d % 32;
      const unsigned c = (codes[g * 16 + o % 16].bits >> (o / 16 * 4)) & 15u;
      REQUIRE(got[i] == F::value_at(codes.data(), d, param.data()));
      REQUIRE(got[i] == std::fma(float(c), param[g * 64 + o], param[g * 64 + 32 + o]));
      REQUIRE(got[i] == row[std::ptrdiff_t(i)]);
    }
  }
}
