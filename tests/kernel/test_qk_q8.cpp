// qk_direct_q8, int8 (q8_0) key rows on int16 query codes, against the double product of the
// queries and the dequantized keys, within the bound the query's rounding allows; and the
// dequantized loads of q8_0 value rows.
#include "support/random.hpp"

#include <xattn/kernel/aligned.hpp>
#include <xattn/kernel/pv.hpp>
#include <xattn/kernel/qk_q8.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace xattn;

namespace {

/// cols key rows of n int8 codes and n / 32 scales each, as a cache page stores them.
struct q8_keys {
  std::size_t n;
  std::vector<std::int8_t> codes;
  std::vector<float> scales;
  q8_keys(std::size_t cols, std::size_t n, testing::rng& r) : n(n), codes(cols * n), scales(cols * (n / 32)) {
    for (auto& c : codes) c = std::int8_t(std::lround(r.uniform(-127, 127)));
    for (auto& s : scales) s = float(r.uniform(0.001, 0.02));
  }
  kernel::q8_row row(std::size_t c) const { return {codes.data() + c * n, scales.data() + c * (n / 32), 0}; }
  double at(std::size_t c, std::size_t d) const { return double(codes[c * n + d]) * scales[c * (n / 32) + d / 32]; }
};

}  // namespace

TEST_CASE("qk_direct_q8: int8 keys on int16 query codes, within the rounding of the queries", "[kernel]") {
  REQUIRE(kernel::has_q8_products);  // the tests' builds are AVX-512BW or AVX2
  testing::rng r(17);
  // rows 1..5 and 8: every register block and a tail; cols around multiples of 4
  for (auto [rows, cols, n] : {std::tuple{1u, 1u, 32u},
                               {1u, 4u, 128u},
                               {2u, 7u, 64u},
                               {3u, 9u, 128u},
                               {4u, 8u, 96u},
                               {5u, 13u, 128u},
                               {8u, 37u, 256u}}) {
    const std::size_t lds = cols + 2;
    const auto q = r.tensor<float>({rows, n});
    const q8_keys k(cols, n, r);
    std::vector<float> s(rows * lds, -7.0f);
    REQUIRE(kernel::qk_direct_q8(
        q.data(), n, rows, [&](std::size_t c) { return k.row(c); }, cols, n, s.data(), lds));
    for (std::size_t i = 0; i < rows; ++i) {
      double qmax = 0;
      for (std::size_t d = 0; d < n; ++d) qmax = std::max(qmax, double(std::abs(q(i, d))));
      for (std::size_t c = 0; c < cols; ++c) {
        double want = 0, k1 = 0, qk1 = 0;
        for (std::size_t d = 0; d < n; ++d) {
          want += double(q(i, d)) * k.at(c, d);
          k1 += std::abs(k.at(c, d));
          qk1 += std::abs(double(q(i, d)) * k.at(c, d));
        }
        // each query feature moves by at most half a code step, qmax / 65534; float sums add a
        // few units of roundoff of the absolute products
        const double bound = k1 * qmax / 65534 + 8 * qk1 * std::numeric_limits<float>::epsilon();
        INFO("rows " << rows << ", cols " << cols << ", n " << n << ", row " << i << ", key " << c);
        REQUIRE(std::abs(double(s[i * lds + c]) - want) <= bound);
      }
      REQUIRE(s[i * lds + cols] == -7.0f);  // nothing written past the row's keys
    }
  }
}

TEST_CASE("qk_direct_q8: query codes round to nearest with max|q| at 32767", "[kernel]") {
  std::vector<float> q(32, 0.0f);
  q[0] = -2.0f;
  q[1] = 1.0f;
  q[2] = 2.0f / 32767 * 0.49f;  // under half a step: 0
  q[3] = 2.0f / 32767 * 0.51f;  // over: 1
  std::vector<std::int16_t> codes(32);
  CHECK(kernel::detail::quantize_query16(q.data(), 32, codes.data()) == Approx(2.0f / 32767));
  CHECK(codes[0] == -32767);
  CHECK((codes[1] == 16383 || codes[1] == 16384));  // 16383.5, either neighbour
  CHECK(codes[2] == 0);
  CHECK(codes[3] == 1);
  std::vector<float> zero(32, 0.0f);
  CHECK(kernel::detail::quantize_query16(zero.data(), 32, codes.data()) == 0.0f);
  CHECK(codes[0] == 0);
}

TEST_CASE("qk_direct_q8 declines what it cannot do exactly, writing nothing", "[kernel]") {
  testing::rng r(5);
  const std::size_t cols = 5, lds = cols;
  std::vector<float> s(2 * lds, -7.0f);
  const auto untouched = [&] {
    for (float x : s)
      if (x != -7.0f) return false;
    return true;
  };
  const auto k = q8_keys(cols, 64, r);
  const auto rows = [&](std::size_t c) { return k.row(c); };

  auto q = r.tensor<float>({2, 64});
  q(1, 3) = std::numeric_limits<float>::infinity();  // inf · 0 must give NaN, as the float path does
  CHECK_FALSE(kernel::qk_direct_q8(q.data(), 64, 2, rows, cols, 64, s.data(), lds));
  q(1, 3) = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(kernel::qk_direct_q8(q.data(), 64, 2, rows, cols, 64, s.data(), lds));
  CHECK(untouched());

  q(1, 3) = 0.5f;  // not whole groups of 32
  CHECK_FALSE(kernel::qk_direct_q8(q.data(), 64, 2, rows, cols, 48, s.data(), lds));
  // keys from column 16 on: their first scale covers features that are not theirs
  CHECK_FALSE(kernel::qk_direct_q8(
      q.data(), 64, 2,
      [&](std::size_t c) {
        return kernel::q8_row{k.row(c).q, k.row(c).scale, 16};
      },
      cols, 32, s.data(), lds));
  CHECK(untouched());
  // more query features than the stack holds
  const auto many = r.tensor<float>({64, 128});
  const auto k128 = q8_keys(cols, 128, r);
  std::vector<float> s64(64 * cols);
  CHECK_FALSE(kernel::qk_direct_q8(
      many.data(), 128, 64, [&](std::size_t c) { return k128.row(c); }, cols, 128, s64.data(), cols));
  CHECK(kernel::qk_direct_q8(q.data(), 64, 2, rows, cols, 64, s.data(), lds));
}

TEMPLATE_TEST_CASE("load_row_as: a q8_0 row's batches are its dequantized features, from any column", "[kernel]", float,
                   double) {
  testing::rng r(12);
  const q8_keys rows(2, 256, r);
  constexpr std::size_t w = simd::width<TestType>, cc = 8;
  for (const std::size_t col : {std::size_t(0), w, 2 * w, 32 + w, std::size_t(3)}) {  // 3: not on a batch boundary
    INFO("from column " << col);
    const kernel::q8_row row = rows.row(1) + col;
    simd::batch<TestType> got[cc], pinned[cc];
    kernel::detail::load_row_as<false>(row, got);
    kernel::detail::load_row_as<true>(row, pinned);
    for (std::size_t c = 0; c < cc; ++c) {
      alignas(64) TestType lanes[w], held[w];
      got[c].store_aligned(lanes);
      pinned[c].store_aligned(held);
      for (std::size_t i = 0; i < w; ++i) {
        const std::size_t d = col + c * w + i;
        const TestType want = TestType(float(rows.codes[256 + d]) * rows.scales[8 + d / 32]);  // as q8_row[d]
        REQUIRE(lanes[i] == want);
        REQUIRE(held[i] == want);
      }
    }
  }
}

namespace {

/// The keys of q8_keys as a cache page lays its int8 keys out (row_layout): page_rows rows
/// interleaved by pairs of features, each group's scales of all rows together, on a cache line.
struct interleaved_keys {
  std::size_t n, page_rows;
  kernel::aligned_vector<std::int8_t> codes;
  kernel::aligned_vector<float> scales;
  interleaved_keys(const q8_keys& k, std::size_t page_rows)
      : n(k.n), page_rows(page_rows), codes(page_rows * k.n), scales(page_rows * (k.n / 32)) {
    for (std::size_t c = 0; c < page_rows; ++c) {
      for (std::size_t d = 0; d < n; ++d) codes[d / 2 * 2 * page_rows + 2 * c + d % 2] = k.codes[c * n + d];
      for (std::size_t g = 0; g < n / 32; ++g) scales[g * page_rows + c] = k.scales[c * (n / 32) + g];
    }
  }
  kernel::q8_pair_row row(std::size_t c) const { return {codes.data() + 2 * c, scales.data() + c, 0, page_rows}; }
};

}  // namespace

TEST_CASE("qk_direct_q8: keys interleaved by pairs, by blocks of 16 or gathered, give key_score's bits", "[kernel]") {
  testing::rng r(23);
  for (auto [rows, n, first, cols] : {std::tuple{1u, 128u, 0u, 64u},  // four whole blocks
                                      {4u, 128u, 16u, 29u},           // from a page's second block, a short last one
                                      {3u, 64u, 0u, 7u},              // one short block
                                      {2u, 96u, 5u, 40u},             // not on a block: gathered
                                      {5u, 32u, 32u, 32u}}) {         // row blocks of 4 and 1
    INFO("rows " << rows << ", n " << n << ", keys from " << first << ", " << cols << " of them");
    const std::size_t lds = cols + 3, from = first,
                      last = first + cols - 1;  // lambdas capture copies (clang 14: not bindings)
    const q8_keys k(72, n, r);
    const interleaved_keys blocks(k, 64), by_key(k, 72);  // 72 rows: not a multiple of 16
    CHECK(kernel::detail::in_pair_block(blocks.row(first), blocks.row(first + 15), 16) == (first % 16 == 0));
    CHECK_FALSE(kernel::detail::in_pair_block(by_key.row(first), by_key.row(first + 15), 16));
    const auto q = r.tensor<float>({rows, n});
    std::vector<float> got(rows * lds, -7.0f), one_by_one(rows * lds, -7.0f), picked(rows * lds, -7.0f);
    REQUIRE(kernel::qk_direct_q8(
        q.data(), n, rows, [&](std::size_t c) { return blocks.row(from + c); }, cols, n, got.data(), lds));
    REQUIRE(kernel::qk_direct_q8(
        q.data(), n, rows, [&](std::size_t c) { return by_key.row(from + c); }, cols, n, one_by_one.data(), lds));
    // a selection's rows: the same keys in reverse order, each flagged scattered (rows whose
    // neighbours in the page are not the next keys)
    REQUIRE(kernel::qk_direct_q8(
        q.data(), n, rows,
        [&](std::size_t c) {
          auto k = blocks.row(last - c);
          k.scattered = true;
          return k;
        },
        cols, n, picked.data(), lds));
    std::vector<std::int16_t> codes(n);
    for (std::size_t i = 0; i < rows; ++i) {
      double qmax = 0;
      for (std::size_t d = 0; d < n; ++d) qmax = std::max(qmax, double(std::abs(q(i, d))));
      const float qs = kernel::detail::quantize_query16(&q(i, 0), n, codes.data());
      for (std::size_t c = 0; c < cols; ++c) {
        INFO("row " << i << ", key " << c);
        const float one = kernel::detail::key_score(codes.data(), qs, blocks.row(first + c), n);
        REQUIRE(got[i * lds + c] == one);
        REQUIRE(one_by_one[i * lds + c] == one);
        REQUIRE(picked[i * lds + cols - 1 - c] == one);
        double want = 0, k1 = 0, qk1 = 0;
        for (std::size_t d = 0; d < n; ++d) {
          want += double(q(i, d)) * k.at(first + c, d);
          k1 += std::abs(k.at(first + c, d));
          qk1 += std::abs(double(q(i, d)) * k.at(first + c, d));
        }
        REQUIRE(std::abs(double(got[i * lds + c]) - want) <=
                k1 * qmax / 65534 + 8 * qk1 * std::numeric_limits<float>::epsilon());
      }
      for (std::size_t c = cols; c < lds; ++c) REQUIRE(got[i * lds + c] == -7.0f);  // nothing past the keys
    }
  }
}
