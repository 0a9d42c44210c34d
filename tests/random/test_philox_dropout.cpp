#include <xattn/random/philox_dropout.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

using xattn::random::dropout;

namespace {

std::vector<std::uint8_t> mask_row(const dropout& d, std::uint32_t b, std::uint32_t h, std::uint32_t i,
                                   std::uint32_t j0, std::size_t n) {
  std::vector<std::uint8_t> out(n, 7);  // 7: never written by keep_mask_row, catches gaps
  xattn::random::keep_mask_row(d, b, h, i, j0, n, out.data());
  return out;
}

// Splits [0, n) into random chunk lengths (including empty ones) and feeds each to f(start, len).
void random_chunks(std::size_t n, std::uint32_t rng_seed, const std::function<void(std::size_t, std::size_t)>& f) {
  std::mt19937 rng(rng_seed);
  std::uniform_int_distribution<std::size_t> len(0, 13);
  for (std::size_t start = 0; start < n;) {
    const std::size_t l = std::min(len(rng), n - start);
    f(start, l);
    start += l;
  }
}

double correlation(const std::vector<std::uint8_t>& x, const std::vector<std::uint8_t>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxy = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    sx += x[k];
    sy += y[k];
    sxy += x[k] * y[k];
  }
  // For 0/1 data, sum of squares equals the sum.
  const double cov = sxy / n - (sx / n) * (sy / n);
  const double vx = sx / n - (sx / n) * (sx / n);
  const double vy = sy / n - (sy / n) * (sy / n);
  return cov / std::sqrt(vx * vy);
}

}  // namespace

TEST_CASE("the (seed, b, h, i, j) -> Philox mapping matches the documented one", "[random]") {
  // Random123's published known-answer vectors for philox4x32 with 10 rounds.
  // With p = 0.5 the threshold is 2^31, so a key is kept iff its word's top bit is set.
  const dropout zero{0.5f, 0};  // ctr = key = 0 -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8
  CHECK_FALSE(xattn::random::keep(zero, 0, 0, 0, 0));
  CHECK(xattn::random::keep(zero, 0, 0, 0, 1));
  CHECK(xattn::random::keep(zero, 0, 0, 0, 2));
  CHECK(xattn::random::keep(zero, 0, 0, 0, 3));

  // ctr = 243f6a88 85a308d3 13198a2e 03707344, key = a4093822 299f31d0
  //   -> d16cfe09 94fdcceb 5001e420 24126ea1
  const dropout pi{0.5f, 0x299f31d0a4093822ULL};
  const std::uint32_t b = 0x243f6a88, h = 0x85a308d3, i = 0x13198a2e, j = 0x03707344u * 4;
  CHECK(mask_row(pi, b, h, i, j, 4) == std::vector<std::uint8_t>{1, 1, 0, 0});

  // Threshold between the words 0x24126ea1 and 0x5001e420: p = 0.25 -> 2^30 keeps 3 of them.
  CHECK(mask_row(dropout{0.25f, pi.seed}, b, h, i, j, 4) == std::vector<std::uint8_t>{1, 1, 1, 0});
}

TEST_CASE("drop_threshold is round(p * 2^32)", "[random]") {
  using xattn::random::drop_threshold;
  CHECK(drop_threshold(0.0f) == 0u);
  CHECK(drop_threshold(0.5f) == 0x80000000u);
  CHECK(drop_threshold(0.25f) == 0x40000000u);
  CHECK(drop_threshold(std::nextafter(1.0f, 0.0f)) == 0xffffff00u);  // largest valid p
  CHECK(drop_threshold(std::ldexp(1.0f, -33)) == 1u);                // 0.5 rounds away from zero
  CHECK(drop_threshold(std::ldexp(1.0f, -34)) == 0u);                // 0.25 rounds down
}

TEST_CASE("decisions are deterministic", "[random]") {
  const dropout d{0.3f, 0x0123456789abcdefULL};
  const auto first = mask_row(d, 1, 2, 3, 0, 1000);
  CHECK(mask_row(d, 1, 2, 3, 0, 1000) == first);
  for (std::uint32_t j = 0; j < 1000; ++j) {
    REQUIRE(xattn::random::keep(d, 1, 2, 3, j) == (first[j] == 1));
    REQUIRE(xattn::random::keep(d, 1, 2, 3, j) == xattn::random::keep(d, 1, 2, 3, j));
  }
  // A different seed gives a different mask.
  CHECK(mask_row(dropout{0.3f, d.seed + 1}, 1, 2, 3, 0, 1000) != first);
}

TEST_CASE("a row gives the same decisions however it is split", "[random]") {
  const dropout d{0.4f, 42};
  const std::size_t n = 1037;
  for (const std::uint32_t j0 : {0u, 1u, 3u, 6u, 4294967295u - 1037u}) {
    const auto whole = mask_row(d, 5, 1, 9, j0, n);
    for (std::size_t k = 0; k < n; ++k) {
      REQUIRE(whole[k] == (xattn::random::keep(d, 5, 1, 9, j0 + static_cast<std::uint32_t>(k)) ? 1 : 0));
    }
    for (std::uint32_t trial = 0; trial < 20; ++trial) {
      std::vector<std::uint8_t> pieces(n, 7);
      random_chunks(n, trial, [&](std::size_t start, std::size_t len) {
        xattn::random::keep_mask_row(d, 5, 1, 9, j0 + static_cast<std::uint32_t>(start), len, pieces.data() + start);
      });
      REQUIRE(pieces == whole);
    }
  }
}

TEST_CASE("scale_row zeroes dropped weights and rescales kept ones, for any split", "[random]") {
  const dropout d{0.3f, 7};
  const std::size_t n = 501;
  const auto mask = mask_row(d, 0, 3, 2, 11, n);
  const float fscale = static_cast<float>(1.0 / (1.0 - 0.3f));
  const double dscale = 1.0 / (1.0 - static_cast<double>(0.3f));

  std::vector<float> fw(n), fw_pieces;
  std::vector<double> dw(n), dw_pieces;
  for (std::size_t k = 0; k < n; ++k) {
    fw[k] = 0.5f + static_cast<float>(k) / 1024.0f;
    dw[k] = 0.5 + static_cast<double>(k) / 1024.0;
  }
  fw_pieces = fw;
  dw_pieces = dw;
  const auto fw_in = fw;
  const auto dw_in = dw;
  xattn::random::scale_row(d, 0, 3, 2, 11, n, fw.data());
  xattn::random::scale_row(d, 0, 3, 2, 11, n, dw.data());
  for (std::size_t k = 0; k < n; ++k) {
    REQUIRE(fw[k] == (mask[k] ? fw_in[k] * fscale : 0.0f));
    REQUIRE(dw[k] == (mask[k] ? dw_in[k] * dscale : 0.0));
  }
  random_chunks(n, 99, [&](std::size_t start, std::size_t len) {
    const auto j = 11 + static_cast<std::uint32_t>(start);
    xattn::random::scale_row(d, 0, 3, 2, j, len, fw_pieces.data() + start);
    xattn::random::scale_row(d, 0, 3, 2, j, len, dw_pieces.data() + start);
  });
  CHECK(fw_pieces == fw);
  CHECK(dw_pieces == dw);
}

TEST_CASE("the keep rate is 1 - p", "[random]") {
  const std::size_t rows = 1000, cols = 1000;  // 1e6 draws
  for (const float p : {0.1f, 0.5f, 0.9f}) {
    const dropout d{p, 0xfeedULL};
    std::size_t kept = 0;
    for (std::uint32_t i = 0; i < rows; ++i) {
      for (const auto m : mask_row(d, 0, 0, i, 0, cols)) kept += m;
    }
    const double n = static_cast<double>(rows * cols);
    const double rate = static_cast<double>(kept) / n;
    const double se = std::sqrt(p * (1.0 - p) / n);
    INFO("p = " << p << ", keep rate = " << rate << ", standard error = " << se);
    CHECK(std::abs(rate - (1.0 - p)) < 5 * se);
  }
}

TEST_CASE("scaled weights are unbiased", "[random]") {
  const dropout d{0.5f, 3};
  std::vector<double> w(1000);
  double sum = 0;
  for (std::uint32_t i = 0; i < 1000; ++i) {
    std::fill(w.begin(), w.end(), 1.0);
    xattn::random::scale_row(d, 0, 0, i, 0, w.size(), w.data());
    for (const double x : w) sum += x;
  }
  const double mean = sum / 1e6;
  const double se = std::sqrt(0.5 * 0.5 / 1e6) / 0.5;  // sd of a 0/2 variable over sqrt(n)
  CHECK(std::abs(mean - 1.0) < 5 * se);
}

TEST_CASE("neighbouring decisions look independent", "[random]") {
  const dropout d{0.5f, 0xabcdef};
  const std::uint32_t rows = 1000;
  const std::size_t cols = 1000;
  const auto draw = [&](const dropout& dd, std::uint32_t b, std::uint32_t h, std::uint32_t di, std::uint32_t j0) {
    std::vector<std::uint8_t> all;
    all.reserve(rows * cols);
    for (std::uint32_t i = 0; i < rows; ++i) {
      const auto row = mask_row(dd, b, h, i + di, j0, cols);
      all.insert(all.end(), row.begin(), row.end());
    }
    return all;
  };
  const auto base = draw(d, 0, 0, 0, 0);
  const double limit = 5.0 / std::sqrt(static_cast<double>(rows * cols));  // ~5 standard errors

  const std::vector<std::pair<const char*, std::vector<std::uint8_t>>> others = {
      {"next key (j + 1)", draw(d, 0, 0, 0, 1)},
      {"same lane, next block (j + 4)", draw(d, 0, 0, 0, 4)},
      {"next query (i + 1)", draw(d, 0, 0, 1, 0)},
      {"next head (h + 1)", draw(d, 0, 1, 0, 0)},
      {"next batch (b + 1)", draw(d, 1, 0, 0, 0)},
      {"next seed", draw(dropout{0.5f, d.seed + 1}, 0, 0, 0, 0)},
      {"seed high word", draw(dropout{0.5f, d.seed ^ (1ULL << 32)}, 0, 0, 0, 0)},
  };
  for (const auto& [name, other] : others) {
    const double r = correlation(base, other);
    INFO(name << ": correlation " << r << ", limit " << limit);
    CHECK(std::abs(r) < limit);
  }
}

TEST_CASE("p = 0 keeps everything and leaves weights untouched", "[random]") {
  const dropout d{0.0f, 123};
  for (const auto m : mask_row(d, 4, 5, 6, 0, 4099)) REQUIRE(m == 1);
  CHECK(xattn::random::keep(d, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff));
  std::vector<float> w = {0.25f, -1.5f, 3.0e-38f, 7.0f};
  const auto before = w;
  xattn::random::scale_row(d, 0, 0, 0, 0, w.size(), w.data());
  CHECK(w == before);
}

TEST_CASE("rows reaching the last key work and longer ones throw", "[random]") {
  const dropout d{0.5f, 1};
  const auto tail = mask_row(d, 0, 0, 0, 4294967293u, 3);  // keys 2^32 - 3 .. 2^32 - 1
  for (std::uint32_t k = 0; k < 3; ++k) {
    CHECK(tail[k] == (xattn::random::keep(d, 0, 0, 0, 4294967293u + k) ? 1 : 0));
  }
  std::uint8_t out[4];
  CHECK_THROWS_AS(xattn::random::keep_mask_row(d, 0, 0, 0, 4294967293u, 4, out), std::invalid_argument);
  xattn::random::keep_mask_row(d, 0, 0, 0, 17, 0, nullptr);  // empty row: nothing written
}

TEST_CASE("p outside [0, 1) is rejected with a message", "[random]") {
  using Catch::Matchers::Equals;
  CHECK_THROWS_WITH((dropout{1.0f, 0}.check()), Equals("xattn: dropout p must be in [0, 1), got 1"));
  CHECK_THROWS_WITH((dropout{1.5f, 0}.check()), Equals("xattn: dropout p must be in [0, 1), got 1.5"));
  CHECK_THROWS_WITH((dropout{-0.25f, 0}.check()), Equals("xattn: dropout p must be in [0, 1), got -0.25"));
  CHECK_THROWS_WITH((dropout{std::numeric_limits<float>::infinity(), 0}.check()),
                    Equals("xattn: dropout p must be in [0, 1), got inf"));
  CHECK_THROWS_WITH(
      (dropout{std::numeric_limits<float>::quiet_NaN(), 0}.check()),
      Catch::Matchers::StartsWith("xattn: dropout p must be in [0, 1), got ") && Catch::Matchers::Contains("nan"));
  CHECK_NOTHROW(dropout{0.0f, 0}.check());
  CHECK_NOTHROW(dropout{std::nextafter(1.0f, 0.0f), 0}.check());

  // Every entry point validates, so a bad p can never reach the threshold arithmetic.
  const dropout bad{1.0f, 0};
  std::uint8_t m[4];
  float f[4] = {};
  double g[4] = {};
  CHECK_THROWS_AS(xattn::random::keep(bad, 0, 0, 0, 0), std::invalid_argument);
  CHECK_THROWS_AS(xattn::random::keep_mask_row(bad, 0, 0, 0, 0, 4, m), std::invalid_argument);
  CHECK_THROWS_AS(xattn::random::scale_row(bad, 0, 0, 0, 0, 4, f), std::invalid_argument);
  CHECK_THROWS_AS(xattn::random::scale_row(bad, 0, 0, 0, 0, 4, g), std::invalid_argument);
}
