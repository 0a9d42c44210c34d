// Numerical edge cases: huge logits under masks, -inf float masks, long sequences (S = 65536) and
// wide heads (D = 1024), each checked against the double reference with the fitted bound of
// docs/numerics.md (hardening/error_bound.hpp).
#include "hardening/error_bound.hpp"
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <limits>

using namespace xattn;

namespace {

/// max |fused - reference| and the bound for a (1, Sq, Dv) result.
template <class T, class E, class Out>
std::pair<double, double> error_and_bound(const E& e, const Out& got, std::size_t d, std::size_t s, double max_v) {
  const auto want = reference(e);
  double max_s = 0, err = 0;
  for (double x : want.scores)
    if (std::isfinite(x) && x != lengths_mask{}.fill_value) max_s = std::max(max_s, std::abs(x));
  for (std::size_t i = 0; i < got.shape()[1]; ++i)
    for (std::size_t c = 0; c < got.shape()[2]; ++c)
      err = std::max(err, std::abs(double(got(0, i, c)) - want.output(0, 0, i, c)));
  return {err, hardening::error_bound<T>(d, s, max_s, max_v)};
}

}  // namespace

TEST_CASE("logits of +-1e4 under causal and lengths masks stay within the bound", "[numerics]") {
  testing::rng r(50);
  for (const double big : {1e4, -1e4}) {
    const xt::xtensor<float, 3> q = r.tensor<float>({1, 40, 16}) * float(big), k = r.tensor<float>({1, 300, 16}),
                                v = r.tensor<float>({1, 300, 8});
    xt::xtensor<int, 2> lens = xt::xtensor<int, 2>::from_shape({1, 40});
    for (auto& l : lens) l = int(r.size(0, 300));
    auto Q = ref(q), K = ref(k), V = ref(v);
    const auto e =
        softmax(mask(mask(Q * trans(K) / 4.0, causal(align::bottom_right)), lengths(lens, masked_rows::zero))) * V;
    const xt::xtensor<float, 3> got = eval(e, {7, 48, 2});
    const auto [err, bound] = error_and_bound<float>(e, got, 16, 300, 1);
    INFO("logit scale " << big << ": error " << err << ", bound " << bound);
    REQUIRE(err <= bound);
  }
}

TEST_CASE("logits of +-1e30: the softmax is one-hot and masked keys never win, even with the largest score",
          "[numerics]") {
  testing::rng r(51);
  for (const float big : {1e30f, -1e30f}) {
    xt::xtensor<float, 3> q = r.tensor<float>({1, 24, 8}) * big, k = r.tensor<float>({1, 64, 8});
    const xt::xtensor<float, 3> v = r.tensor<float>({1, 64, 4});
    auto Q = ref(q), K = ref(k), V = ref(v);
    const auto e = softmax(mask(Q * trans(K), causal())) * V;
    const xt::xtensor<float, 3> got = eval(e, {5, 16, 1});
    const auto want = reference(e);
    for (std::size_t i = 0; i < 24; ++i) {
      std::size_t best = 0;  // the visible key with the largest reference score
      for (std::size_t j = 1; j <= i; ++j)
        if (want.scores(0, 0, i, j) > want.scores(0, 0, i, best)) best = j;
      for (std::size_t c = 0; c < 4; ++c) REQUIRE(got(0, i, c) == v(0, best, c));
    }
  }
}

TEST_CASE("d2l's -1e6 fill beats visible logits of -1e30 (the reference agrees), and -inf biases still exclude",
          "[numerics]") {
  testing::rng r(52);
  const xt::xtensor<float, 3> q = xt::ones<float>({1, 6, 4}) * -1e30f, k = xt::abs(r.tensor<float>({1, 50, 4})) + 0.5f;
  const xt::xtensor<float, 3> v = r.tensor<float>({1, 50, 3});
  xt::xtensor<float, 2> b = xt::zeros<float>({6, 50});
  xt::view(b, 2, xt::range(20, 50)) = -std::numeric_limits<float>::infinity();  // row 2 also loses its filled keys
  const xt::xtensor<int, 1> lens = {20};
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(Q * trans(K) + bias(b), lengths(lens))) * V;
  for (std::size_t bk : {16u, 64u}) {
    const xt::xtensor<float, 3> got = eval(e, {4, bk, 1});
    const auto want = reference(e);
    REQUIRE(testing::max_abs_diff(got, xt::view(want.output, xt::all(), 0)) < 1e-6);
    double mean_tail = 0;  // rows other than 2: uniform over the 30 filled keys
    for (std::size_t j = 20; j < 50; ++j) mean_tail += v(0, j, 1) / 30.0;
    REQUIRE(got(0, 0, 1) == Approx(mean_tail).margin(1e-6));
  }
}

TEST_CASE("S = 65536 keys, one head: sampled rows within the bound", "[numerics][long]") {
  testing::rng r(53);
  const std::size_t s = 65536, d = 16, rows = 32;
  const xt::xtensor<float, 3> k = r.tensor<float>({1, s, d}),
                              v = r.tensor<float>({1, s, d}, 0, 1);  // same-sign V: worst case
  const xt::xtensor<float, 3> q = r.tensor<float>({1, rows, d}) * 2.0f;
  // causal for the sampled rows: row n stands for position n * 2048 + 2047 and sees that many keys
  xt::xtensor<int, 2> lens = xt::xtensor<int, 2>::from_shape({1, rows});
  for (std::size_t n = 0; n < rows; ++n) lens(0, n) = int((n + 1) * (s / rows));
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(Q * trans(K) / 4.0, lengths(lens, masked_rows::zero))) * V;
  const xt::xtensor<float, 3> got = eval(e, {32, 256, 2});
  const auto [err, bound] = error_and_bound<float>(e, got, d, s, 1);
  INFO("error " << err << " (" << err / 0x1p-24 << " eps), bound " << bound);
  REQUIRE(err <= bound);
}

TEMPLATE_TEST_CASE("D = 1024 within the bound", "[numerics]", float, double) {
  testing::rng r(54);
  const std::size_t s = 700, d = 1024;
  const xt::xtensor<TestType, 3> q = r.tensor<TestType>({1, 24, d}), k = r.tensor<TestType>({1, s, d}),
                                 v = r.tensor<TestType>({1, s, d});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(Q * trans(K) * (10 / 32.0), window(300, 0, align::bottom_right))) * V;  // |s| ~ 15
  const xt::xtensor<TestType, 3> got = eval(e, {6, 128, 2});
  const auto [err, bound] = error_and_bound<TestType>(e, got, d, s, 1);
  INFO("error " << err << ", bound " << bound);
  REQUIRE(err <= bound);
}
