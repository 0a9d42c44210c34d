// qk_direct_q4, 4-bit (q4_0) keys of a cache page (rows interleaved by pairs of bytes) on int16
// query codes: against the exact integer products of the codes within float rounding and against
// the double product of the queries and the dequantized keys within the bound the query's
// rounding allows; blocks of 16 rows, gathered rows and scattered ones bit for bit the one-key
// score; and q4's whole-group decoding of value rows, bit for bit the batches decoded one at a time.
#include "support/random.hpp"

#include <xattn/kernel/aligned.hpp>
#include <xattn/kernel/qk_q4.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace xattn;

namespace {

/// cols rows of n 4-bit codes (random bytes: every nibble value) and n / 32 scales each, one row
/// after the other as a cache's value page stores them.
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

/// The rows of q4_keys as a cache page lays its q4 keys out (row_layout): page_rows rows
/// interleaved by pairs of bytes, each group's scales of all rows together, on a cache line.
struct q4_page {
  std::size_t n, page_rows;
  kernel::aligned_vector<q4> codes;
  kernel::aligned_vector<float> scales;
  q4_page(const q4_keys& k, std::size_t page_rows)
      : n(k.n), page_rows(page_rows), codes(page_rows * k.n / 2), scales(page_rows * (k.n / 32)) {
    for (std::size_t c = 0; c < std::min(page_rows, k.codes.size() / (n / 2)); ++c) {  // rows past k's: zero
      for (std::size_t b = 0; b < n / 2; ++b) codes[b / 2 * 2 * page_rows + 2 * c + b % 2] = k.codes[c * n / 2 + b];
      for (std::size_t g = 0; g < n / 32; ++g) scales[g * page_rows + c] = k.scales[c * (n / 32) + g];
    }
  }
  kernel::q4_pair_row row(std::size_t c, std::size_t col = 0) const {
    return {codes.data() + 2 * c, scales.data() + c, col, page_rows};
  }
};

}  // namespace

TEST_CASE("q4 key rows interleaved by pairs of bytes read as the rows they are", "[kernel]") {
  testing::rng r(19);
  const q4_keys k(40, 128, r);
  const q4_page page(k, 40);
  for (std::size_t c : {0u, 1u, 17u, 39u})
    for (std::size_t col : {0u, 32u, 48u}) {
      const auto row = page.row(c, col);
      for (std::size_t d = 0; col + d < 128; ++d) REQUIRE(row[std::ptrdiff_t(d)] == float(k.at(c, col + d)));
      alignas(64) float lanes[simd::width<float>];
      row.load<float>().store_aligned(lanes);
      for (std::size_t i = 0; i < simd::width<float>; ++i) REQUIRE(lanes[i] == float(k.at(c, col + i)));
    }
}

TEST_CASE("qk_direct_q4: q4 keys on int16 query codes, by blocks of 16, gathered or one by one", "[kernel]") {
  REQUIRE(kernel::has_q4_products);  // the tests' builds are AVX-512BW or AVX2
  testing::rng r(23);
  // rows 1..5 and 8: every register block and a tail; whole blocks, a short one, keys from a
  // page's second block, keys not on a block (gathered), a key column past the row's start, and
  // features past what a gathered block holds (key by key)
  for (auto [rows, n, first, cols, col] : {std::tuple{1u, 128u, 0u, 64u, 0u},
                                           {4u, 128u, 16u, 29u, 0u},
                                           {3u, 64u, 0u, 7u, 0u},
                                           {2u, 96u, 5u, 40u, 0u},
                                           {5u, 128u, 32u, 32u, 64u},
                                           {8u, 256u, 0u, 37u, 32u},
                                           {1u, 2080u, 3u, 20u, 0u}}) {
    INFO("rows " << rows << ", n " << n << ", keys from " << first << ", " << cols << " of them, column " << col);
    const std::size_t lds = cols + 3, from = first, last = first + cols - 1, at = col,
                      width = n - col;  // lambdas capture copies (clang 14: not bindings)
    const q4_keys k(72, n, r);
    const q4_page blocks(k, 64), by_key(k, 72);  // 72 rows: not a multiple of 16
    CHECK(kernel::detail::in_pair_block(blocks.row(first, col), blocks.row(first + 15, col), 16) == (first % 16 == 0));
    CHECK_FALSE(kernel::detail::in_pair_block(by_key.row(first, col), by_key.row(first + 15, col), 16));
    const auto q = r.tensor<float>({rows, width});
    std::vector<float> got(rows * lds, -7.0f), one_by_one(rows * lds, -7.0f), picked(rows * lds, -7.0f);
    REQUIRE(kernel::qk_direct_q4(
        q.data(), width, rows, [&](std::size_t c) { return blocks.row(from + c, at); }, cols, width, got.data(), lds));
    REQUIRE(kernel::qk_direct_q4(
        q.data(), width, rows, [&](std::size_t c) { return by_key.row(from + c, at); }, cols, width, one_by_one.data(),
        lds));
    // a selection's rows: the same keys in reverse order, each flagged scattered
    REQUIRE(kernel::qk_direct_q4(
        q.data(), width, rows,
        [&](std::size_t c) {
          auto key = blocks.row(last - c, at);
          key.scattered = true;
          return key;
        },
        cols, width, picked.data(), lds));
    std::vector<std::int16_t> codes(width);
    std::vector<std::int32_t> offsets(width / 32);
    for (std::size_t i = 0; i < rows; ++i) {
      const float qs = kernel::detail::quantize_query16(&q(i, 0), width, codes.data());
      kernel::detail::q4_query_offsets(codes.data(), width, offsets.data());
      double qmax = 0;
      for (std::size_t d = 0; d < width; ++d) qmax = std::max(qmax, double(std::abs(q(i, d))));
      for (std::size_t c = 0; c < cols; ++c) {
        INFO("row " << i << ", key " << c);
        const float one =
            kernel::detail::q4_key_score(codes.data(), offsets.data(), qs, blocks.row(first + c, col), width);
        REQUIRE(got[i * lds + c] == one);
        REQUIRE(one_by_one[i * lds + c] == one);
        REQUIRE(picked[i * lds + cols - 1 - c] == one);
        double want = 0, exact = 0, k1 = 0, qk1 = 0;
        for (std::size_t d = 0; d < width; ++d) {
          const double kd = k.at(first + c, col + d);
          want += double(q(i, d)) * kd;
          exact += double(codes[d]) * qs * kd;
          k1 += std::abs(kd);
          qk1 += std::abs(double(q(i, d)) * kd);
        }
        // the codes' products exactly, then float sums; and each query feature moves by at most
        // half a code step, qmax / 65534
        const double roundoff = 8 * qk1 * std::numeric_limits<float>::epsilon();
        REQUIRE(std::abs(got[i * lds + c] - exact) <= roundoff);
        REQUIRE(std::abs(got[i * lds + c] - want) <= k1 * qmax / 65534 + roundoff);
      }
      for (std::size_t c = cols; c < lds; ++c) REQUIRE(got[i * lds + c] == -7.0f);  // nothing past the keys
    }
  }
}

TEST_CASE("qk_direct_q4: declines what it does not take, and qk_direct then dequantizes", "[kernel]") {
  testing::rng r(29);
  const q4_keys k(6, 128, r);
  const q4_page page(k, 16);
  const auto key = [&](std::size_t c) { return page.row(c); };
  auto q = r.tensor<float>({2, 128});
  std::vector<float> s(2 * 6, -7.0f), direct(2 * 6);
  CHECK(!kernel::qk_direct_q4(q.data(), 48, 2, key, 6, 48, s.data(), 6));  // 48: not whole groups
  CHECK(!kernel::qk_direct_q4(
      q.data(), 128, 2, [&](std::size_t c) { return page.row(c, 16); }, 6, 64, s.data(), 6));  // not a group's start
  CHECK(!kernel::qk_direct_q4(
      q.data(), 128, 2, [&](std::size_t c) { return k.row(c); }, 6, 128, s.data(), 6));  // rows alone: not keys
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
  q(1, 5) = 0.5f;  // where it takes them, qk_direct is qk_direct_q4
  REQUIRE(kernel::qk_direct_q4(q.data(), 128, 2, key, 6, 128, s.data(), 6));
  kernel::qk_direct(q.data(), 128, 2, key, 6, 128, direct.data(), 6);
  CHECK(s == direct);
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
