// Dropout inside the fused pass: keyed by (seed, b, h, i, j), so every tiling and thread count
// drops the same weights, and the fused output equals the reference applying the same mask.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

using namespace xattn;
using testing::max_abs_diff;

TEST_CASE("dropout: any schedule and thread count gives bitwise the same output") {
  testing::rng r(1);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 3, 45, 16}), k = r.tensor<float>({2, 3, 77, 16}),
                              v = r.tensor<float>({2, 3, 77, 24});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = dropout(softmax(mask(Q * trans(K) / 4.0f, causal(align::bottom_right))), 0.3f, 1234) * V;
  const xt::xtensor<float, 4> base = eval(e, {64, 128, 1});
  for (const schedule s : {schedule{64, 128, 2}, schedule{64, 128, 1}, schedule{7, 16, 2}, schedule{45, 300, 1}}) {
    const xt::xtensor<float, 4> out = eval(e, s);
    if (s.block_k == 128) {
      REQUIRE((out == base));  // same tiling: bitwise, whatever the threads
    } else {
      REQUIRE(max_abs_diff(out, base) < 1e-5);  // other tilings: same drops, other summation order
    }
  }
}

TEST_CASE("dropout: fused equals the reference applying the same mask") {
  testing::rng r(2);
  const xt::xtensor<double, 3> q = r.tensor<double>({2, 20, 8}), k = r.tensor<double>({2, 50, 8}),
                               v = r.tensor<double>({2, 50, 5});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<int, 1> lens = {50, 17};
  const auto e = dropout(softmax(mask(Q * trans(K), lengths(lens))), 0.5f, 99) * V;
  const auto want = reference(e);
  REQUIRE(max_abs_diff(xt::view(want.output, xt::all(), 0), eval(e, {8, 16, 2})) < 1e-12);
  // weights: dropped entries exactly 0, kept ones scaled by 1/(1-p)
  const auto w = eval(dropout(softmax(mask(Q * trans(K), lengths(lens))), 0.5f, 99));
  const auto plain = eval(softmax(mask(Q * trans(K), lengths(lens))));
  std::size_t kept = 0, total = 0;
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 20; ++i)
      for (std::size_t j = 0; j < std::size_t(lens(b)); ++j) {
        const bool keep = random::keep({0.5f, 99}, std::uint32_t(b), 0, std::uint32_t(i), std::uint32_t(j));
        REQUIRE(w(b, i, j) == Approx(keep ? 2 * plain(b, i, j) : 0.0).margin(1e-15));
        kept += keep;
        ++total;
      }
  // keep rate: 1340 draws, p = 0.5; 5 standard errors = 5 * sqrt(0.25 / 1340) = 0.068
  REQUIRE(std::abs(double(kept) / double(total) - 0.5) < 0.068);
}

TEST_CASE("dropout: p = 0 is the identity; a different seed drops other weights; bad p throws") {
  testing::rng r(3);
  const xt::xtensor<float, 3> q = r.tensor<float>({1, 9, 4}), k = r.tensor<float>({1, 30, 4}),
                              v = r.tensor<float>({1, 30, 3});
  auto Q = ref(q), K = ref(k), V = ref(v);
  REQUIRE((eval(dropout(softmax(Q * trans(K)), 0.0f, 5) * V) == eval(softmax(Q * trans(K)) * V)));
  REQUIRE(max_abs_diff(eval(dropout(softmax(Q * trans(K)), 0.5f, 5) * V),
                       eval(dropout(softmax(Q * trans(K)), 0.5f, 6) * V)) > 1e-3);
  REQUIRE_THROWS_WITH(eval(dropout(softmax(Q * trans(K)), 1.0f, 5) * V),
                      Catch::Contains("dropout p must be in [0, 1)"));
}
