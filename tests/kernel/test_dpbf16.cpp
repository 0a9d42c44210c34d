// The vdpbf16ps tile operations against plain double loops over the same bf16 values: the pair
// layouts, the score and P·V products, P's rounding, and V's inf/NaN reaching only the rows that
// give its key weight. The layouts are checked on every build; the products where the build has
// AVX512-BF16 (the project's machines).
#include "support/random.hpp"

#include <xattn/kernel/dpbf16.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace xattn;
using kernel::pair_strip;

namespace {

template <class S>
std::vector<S> random_rows(testing::rng& r, std::size_t count) {
  std::vector<S> x(count);
  for (auto& e : x) e = S(r.uniform(-1, 1));
  return x;
}

}  // namespace

TEMPLATE_TEST_CASE("pack_kt into a pair tile interleaves feature pairs of 64-key strips", "[kernel][bf16]", bfloat16,
                   float) {
  testing::rng r(41);
  for (const auto& size_pair : {std::pair{1u, 1u}, {16u, 32u}, {37u, 40u}, {130u, 64u}, {64u, 17u}, {80u, 96u}})
    for (std::ptrdiff_t dstride : {1, 3}) {
      const std::size_t cols = size_pair.first, n = size_pair.second;  // not bindings: lambdas capture them
      const auto k = random_rows<TestType>(r, cols * n * std::size_t(dstride));
      const std::size_t size = kernel::packed_pairs_size(cols, n);
      std::vector<bfloat16> kt(size + 1, bfloat16(99.0f));
      kernel::pack_kt([&](std::size_t c) { return k.data() + c * n * std::size_t(dstride); }, cols, n, dstride,
                      kernel::in_pairs(kt.data()));
      REQUIRE(float(kt[size]) == 99.0f);  // nothing written past the panel
      for (std::size_t c = 0; c < (cols + pair_strip - 1) / pair_strip * pair_strip; ++c)
        for (std::size_t d = 0; d < n + n % 2; ++d) {
          const float want = c < cols && d < n ? float(bfloat16(float(k[(c * n + d) * std::size_t(dstride)]))) : 0.0f;
          REQUIRE(float(kt[kernel::pair_panel_offset(c, d, n)]) == want);
        }
    }
}

TEST_CASE("pack_strips into a pair tile interleaves the values of key pairs", "[kernel][bf16]") {
  testing::rng r(42);
  for (const auto& size_pair : {std::pair{1u, 1u}, {7u, 32u}, {64u, 64u}, {33u, 40u}, {10u, 128u}})
    for (std::ptrdiff_t stride : {1, 2}) {
      const std::size_t keys = size_pair.first, dv = size_pair.second;
      const std::size_t dvp = (dv + 15) / 16 * 16, size = (keys + keys % 2) * dvp;
      const auto v = random_rows<bfloat16>(r, keys * dv * std::size_t(stride));
      std::vector<bfloat16> vp(size + 1, bfloat16(99.0f));
      kernel::pack_strips([&](std::size_t j) { return v.data() + j * dv * std::size_t(stride); }, keys, dv, stride,
                          kernel::in_pairs(vp.data()), dvp);
      REQUIRE(float(vp[size]) == 99.0f);
      for (std::size_t j = 0; j < keys + keys % 2; ++j)
        for (std::size_t d = 0; d < dvp; ++d) {
          const float want = j < keys && d < dv ? float(v[(j * dv + d) * std::size_t(stride)]) : 0.0f;
          REQUIRE(float(vp[j / 2 * 2 * dvp + 2 * d + j % 2]) == want);
        }
    }
}

// A template test (of one type), so that a build without AVX512-BF16 discards its body unseen.
TEMPLATE_TEST_CASE("vdpbf16ps tiles: Q Kᵀ, P rounded to bf16, P·V", "[kernel][bf16]", float) {
  if constexpr (!kernel::has_dpbf16) {
    WARN("this build has no AVX512-BF16: the vdpbf16ps tiles are not compiled");
  } else {
    testing::rng r(43);
    for (const auto& sizes :
         {std::tuple{1u, 1u, 1u}, {6u, 64u, 64u}, {7u, 37u, 13u}, {13u, 130u, 64u}, {5u, 200u, 128u}}) {
      const std::size_t rows = std::get<0>(sizes), cols = std::get<1>(sizes), n = std::get<2>(sizes);
      // scores: bf16 products are exact, so only fp32's summation differs from the double loop
      const auto q = random_rows<bfloat16>(r, rows * n), k = random_rows<bfloat16>(r, cols * n);
      const std::size_t ldq = n + n % 2, colsp = (cols + 15) / 16 * 16, lds = colsp + 16;
      std::vector<bfloat16> q2(rows * ldq, bfloat16::from_bits(0)), kt(kernel::packed_pairs_size(cols, n));
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t d = 0; d < n; ++d) q2[i * ldq + d] = q[i * n + d];
      kernel::pack_kt([&](std::size_t c) { return k.data() + c * n; }, cols, n, 1, kernel::in_pairs(kt.data()));
      std::vector<float> s(rows * lds, -7.0f);
      kernel::qk_tile(q2.data(), ldq, rows, kernel::in_pairs(kt.data()), n, colsp, 0.5f, s.data(), lds);
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t c = 0; c < colsp; ++c) {
          double want = 0;
          for (std::size_t d = 0; c < cols && d < n; ++d)
            want += double(float(q[i * n + d])) * double(float(k[c * n + d]));
          REQUIRE(std::abs(s[i * lds + c] - 0.5 * want) <= 0.5 * double(n) * 0x1p-24 * double(n));
        }

      // P·V: P rounded to bf16 (round to nearest even), then exact products summed in fp32
      const std::size_t dv = n, dvp = (dv + 15) / 16 * 16, ldp = colsp + 32;
      std::vector<float> p(rows * ldp, 0.0f);
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t c = 0; c < cols; ++c) p[i * ldp + c] = float(r.uniform(0, 1));
      std::vector<bfloat16> p16(rows * ldp);
      for (std::size_t i = 0; i < rows; ++i) {
        kernel::round_row_bf16(p.data() + i * ldp, colsp, p16.data() + i * ldp);
        for (std::size_t c = 0; c < colsp; ++c) REQUIRE(p16[i * ldp + c].bits() == bfloat16(p[i * ldp + c]).bits());
      }
      auto v = random_rows<bfloat16>(r, cols * dv);
      const float inf = std::numeric_limits<float>::infinity();
      const std::size_t hidden = cols / 2;  // an infinite value at a key row 0 gives weight 0 ...
      v[hidden * dv] = bfloat16(inf);
      p[hidden] = 0.0f;
      p16[hidden] = bfloat16(0.0f);
      std::vector<bfloat16> vp((cols + cols % 2) * dvp);
      kernel::pack_strips([&](std::size_t j) { return v.data() + j * dv; }, cols, dv, 1, kernel::in_pairs(vp.data()),
                          dvp);
      std::vector<float> o(rows * dvp, 1.0f);
      kernel::pv_tile_strips(kernel::in_pairs(p16.data()), ldp, p.data(), ldp, rows, kernel::in_pairs(vp.data()), cols,
                             o.data(), dvp, dvp);
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t d = 0; d < dv; ++d) {
          double want = 1;
          for (std::size_t j = 0; j < cols; ++j)
            if (!(i == 0 && j == hidden)) want += double(float(p16[i * ldp + j])) * double(float(v[j * dv + d]));
          INFO("row " << i << " feature " << d);
          if (i > 0 && d == 0 && cols > 1)  // ... and every other row weight > 0: it reaches them as inf
            REQUIRE(o[i * dvp + d] == inf);
          else
            REQUIRE(std::abs(o[i * dvp + d] - want) <= double(cols + 1) * 0x1p-24 * double(cols + 1));
        }
    }
  }
}

// A template test (of one type), so that a build without AVX512-BF16 discards its body unseen.
TEMPLATE_TEST_CASE(
    "pv_tile_strips on pair tiles reads a transposed operand in place: Xᵀ·Y of row pairs (the backward's dK, dV)",
    "[kernel][bf16]", float) {
  if constexpr (!kernel::has_dpbf16) {
    WARN("this build has no AVX512-BF16: the vdpbf16ps tiles are not compiled");
  } else {
    testing::rng r(44);
    for (const auto& sizes : {std::tuple{1u, 1u, 16u}, {7u, 13u, 16u}, {96u, 192u, 64u}, {33u, 70u, 48u}}) {
      // X (rows x cols, float, as dS or P) interleaved by pairs of rows; Y (rows x n) in row pairs
      const std::size_t rows = std::get<0>(sizes), cols = std::get<1>(sizes), n = std::get<2>(sizes);
      const std::size_t lds = cols + 5, cols16 = (cols + 15) / 16 * 16, ldt = 2 * cols16;
      std::vector<float> x(rows * lds);
      for (auto& e : x) e = float(r.uniform(-1, 1));
      const auto y = random_rows<bfloat16>(r, rows * n);
      std::vector<bfloat16> xp((rows + rows % 2) * ldt), yp((rows + rows % 2) * n);
      kernel::pack_strips([&](std::size_t i) { return x.data() + i * lds; }, rows, cols, 1, kernel::in_pairs(xp.data()),
                          cols16);
      kernel::pack_strips([&](std::size_t i) { return y.data() + i * n; }, rows, n, 1, kernel::in_pairs(yp.data()), n);
      std::vector<float> o(cols * n, 0.5f);
      kernel::pv_tile_strips(kernel::in_pairs(xp.data()), 2, static_cast<const float*>(nullptr), 0, cols,
                             kernel::in_pairs(yp.data()), rows, o.data(), n, n, ldt);
      for (std::size_t j = 0; j < cols; ++j)
        for (std::size_t d = 0; d < n; ++d) {
          double want = 0.5;  // X rounded once to bf16, exact products, fp32 sums
          for (std::size_t i = 0; i < rows; ++i)
            want += double(float(bfloat16(x[i * lds + j]))) * double(float(y[i * n + d]));
          INFO("key " << j << " feature " << d);
          REQUIRE(std::abs(o[j * n + d] - want) <= double(rows + 1) * 0x1p-24 * double(rows + 1));
        }
    }
  }
}

TEMPLATE_TEST_CASE("qk_direct: bf16 queries times bf16 key rows in place, by vdpbf16ps", "[kernel][bf16]", float) {
  if constexpr (!kernel::has_dpbf16) {
    WARN("this build has no AVX512-BF16: qk_direct on bf16 queries is not compiled");
  } else {
    testing::rng r(44);
    // rows around the 4-row blocks (a full 4 x 4 block is summed by one tree), keys around the
    // 4-key blocks, features around the 32 per vdpbf16ps (the rest loads as zero)
    for (const auto& sizes :
         {std::tuple{1u, 1u, 1u}, {4u, 8u, 128u}, {4u, 9u, 33u}, {5u, 7u, 31u}, {8u, 25u, 64u}, {3u, 4u, 100u}}) {
      const std::size_t rows = std::get<0>(sizes), cols = std::get<1>(sizes), n = std::get<2>(sizes);
      const auto q = random_rows<bfloat16>(r, rows * n), k = random_rows<bfloat16>(r, cols * n);
      const std::size_t lds = cols + 3;
      std::vector<TestType> s(rows * lds, -7.0f);
      kernel::qk_direct(
          q.data(), n, rows, [&](std::size_t c) { return k.data() + c * n; }, cols, n, 0.25f, s.data(), lds);
      for (std::size_t i = 0; i < rows; ++i) {
        for (std::size_t c = 0; c < cols; ++c) {
          double want = 0;
          for (std::size_t d = 0; d < n; ++d) want += double(float(q[i * n + d])) * double(float(k[c * n + d]));
          INFO("row " << i << " key " << c << " n " << n);
          REQUIRE(std::abs(s[i * lds + c] - 0.25 * want) <= 0.25 * double(n) * 0x1p-24 * double(n));
        }
        REQUIRE(s[i * lds + cols] == -7.0f);  // nothing written past the row's keys
      }
    }
  }
}
