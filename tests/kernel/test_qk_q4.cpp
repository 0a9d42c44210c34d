// qk_direct_q4, 4-bit (q4_0) key rows on int16 query codes: against the double product of the
// queries and the dequantized keys within the bound the query's rounding allows, and against the
// exact integer products of the codes within float rounding; and q4's whole-group decoding of
// value rows, bit for bit the batches decoded one at a time.
#include "support/random.hpp"

#include <xattn/kernel/qk_q4.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace xattn;

namespace {

/// cols key rows of n 4-bit codes (random bytes: every nibble value) and n / 32 scales each, as a
/// cache page stores them.
struct q4_keys {
  std::size_t n;
  std::vector<q4> codes;
  std::vector<float> scales;
  q4_keys(std::size_t cols, std::size_t n, testing::rng& r) : n(n), codes(cols * n / 2), scales(cols * (n / 32)) {
    for (auto& c : codes) c.bits = std::uint8_t(std::lround(r.uniform(0, 255)));
    for (auto& s : scales) s = float(r.uniform(-0.15, 0.15));  // q4_0's scales have either sign
  }
  kernel::q4_row row(std::size_t c, std::size_t col = 0) const {
    return {codes.data() + c * n / 2, scales.data() + c * (n / 32), col};
  }
  double at(std::size_t c, std::size_t d) const {
    return double(cache_format<q4>::value_at(codes.data() + c * n / 2, d, scales[c * (n / 32) + d / 32]));
  }
};

}  // namespace

TEST_CASE("qk_direct_q4: q4 keys on int16 query codes, within the rounding of the queries", "[kernel]") {
  // the tests' builds are AVX-512BW (the products) or AVX2 (q4 keys dequantized, as any format's)
  REQUIRE(kernel::has_q4_products == (sizeof(simd::batch<float>) == 64));
  if (!kernel::has_q4_products) SUCCEED("an AVX2 build: q4 keys take the float path");
  testing::rng r(23);
  // rows 1..5 and 8: every register block and a tail; cols around multiples of 4; a key column
  // past the row's start (64: a step's start)
  for (auto [rows, cols, n, col] : {std::tuple{1u, 1u, 64u, 0u},
                                    {1u, 4u, 128u, 0u},
                                    {2u, 7u, 64u, 0u},
                                    {3u, 9u, 128u, 64u},
                                    {4u, 8u, 192u, 0u},
                                    {5u, 13u, 128u, 0u},
                                    {8u, 37u, 256u, 128u}}) {
    if (!kernel::has_q4_products) break;
    const std::size_t lds = cols + 2, width = n - col, first = col;  // a copy: lambdas do not capture bindings
    const auto q = r.tensor<float>({rows, width});
    const q4_keys k(cols, n, r);
    std::vector<float> s(rows * lds, -7.0f);
    REQUIRE(kernel::qk_direct_q4(
        q.data(), width, rows, [&](std::size_t c) { return k.row(c, first); }, cols, width, s.data(), lds));
    std::vector<std::int16_t> codes(width);
    for (std::size_t i = 0; i < rows; ++i) {
      const float qs = kernel::detail::quantize_query16(&q(i, 0), width, codes.data());
      double qmax = 0;
      for (std::size_t d = 0; d < width; ++d) qmax = std::max(qmax, double(std::abs(q(i, d))));
      for (std::size_t c = 0; c < cols; ++c) {
        double want = 0, exact = 0, k1 = 0, qk1 = 0;
        for (std::size_t d = 0; d < width; ++d) {
          const double kd = k.at(c, col + d);
          want += double(q(i, d)) * kd;
          exact += double(codes[d]) * qs * kd;
          k1 += std::abs(kd);
          qk1 += std::abs(double(q(i, d)) * kd);
        }
        const double got = s[i * lds + c], roundoff = 8 * qk1 * std::numeric_limits<float>::epsilon();
        INFO("rows " << rows << ", cols " << cols << ", n " << n << ", column " << col << ", row " << i << ", key "
                     << c);
        // the codes' products exactly, then float sums; and each query feature moves by at most
        // half a code step, qmax / 65534
        REQUIRE(std::abs(got - exact) <= roundoff);
        REQUIRE(std::abs(got - want) <= k1 * qmax / 65534 + roundoff);
      }
      REQUIRE(s[i * lds + cols] == -7.0f);  // nothing written past the row's keys
    }
  }
}

TEST_CASE("qk_direct_q4: declines what it does not take, and qk_direct then dequantizes", "[kernel]") {
  testing::rng r(29);
  const q4_keys k(6, 128, r);
  const auto key = [&](std::size_t c) { return k.row(c); };
  auto q = r.tensor<float>({2, 128});
  std::vector<float> s(2 * 6, -7.0f), direct(2 * 6);
  CHECK(!kernel::qk_direct_q4(q.data(), 96, 2, key, 6, 96, s.data(), 6));  // 96: not whole steps of 64
  CHECK(!kernel::qk_direct_q4(
      q.data(), 128, 2, [&](std::size_t c) { return k.row(c, 32); }, 6, 64, s.data(), 6));  // not a step's start
  q(1, 5) = std::numeric_limits<float>::infinity();  // a query that is not finite: the float path's
  CHECK(!kernel::qk_direct_q4(q.data(), 128, 2, key, 6, 128, s.data(), 6));
  CHECK(s == std::vector<float>(2 * 6, -7.0f));
  kernel::qk_direct(q.data(), 128, 2, key, 6, 128, direct.data(), 6);  // inf · k: ±inf, or NaN for a zero key feature
  for (std::size_t c = 0; c < 6; ++c) {
    double want = 0;
    for (std::size_t d = 0; d < 128; ++d) want += double(q(0, d)) * k.at(c, d);
    CHECK(std::abs(direct[c] - want) < 1e-4);
    CHECK(!std::isfinite(direct[6 + c]));
  }
  if (kernel::has_q4_products) {  // and where it takes them, qk_direct is qk_direct_q4
    q(1, 5) = 0.5f;
    REQUIRE(kernel::qk_direct_q4(q.data(), 128, 2, key, 6, 128, s.data(), 6));
    kernel::qk_direct(q.data(), 128, 2, key, 6, 128, direct.data(), 6);
    CHECK(s == direct);
  }
}

TEMPLATE_TEST_CASE_SIG("q4 value rows: whole groups decoded at once, bit for bit one batch at a time", "[kernel]",
                       ((std::size_t CC), CC), 2, 4, 8) {
  using B = simd::batch<float>;
  constexpr std::size_t w = simd::width<float>;
  if constexpr (!cache_format<q4>::decodes_groups<float, CC>) {
    SUCCEED("this build dequantizes q4 rows one batch at a time");
  } else {
    testing::rng r(31);
    const std::size_t n = 256;
    const q4_keys v(3, n, r);
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t col = 0; col + CC * w <= n; col += 32) {
        const kernel::q4_row row = v.row(c, col);
        B got[CC];
        REQUIRE(row.load_groups<float, CC>(got));
        for (std::size_t b = 0; b < CC; ++b) {
          alignas(64) float lanes[w], want[w];
          got[b].store_aligned(lanes);
          (row + b * w).load<float>().store_aligned(want);
          for (std::size_t i = 0; i < w; ++i) {
            INFO("row " << c << ", column " << col + b * w + i);
            REQUIRE(std::memcmp(&lanes[i], &want[i], sizeof(float)) == 0);
            REQUIRE(lanes[i] == float(v.at(c, col + b * w + i)));
          }
        }
      }
    B out[CC];
    CHECK(!v.row(0, 16).load_groups<float, CC>(out));  // not a group's start
  }
}
