// Catalogue E14-E18: empty and zero-sized axes. Skv = 0 is an error (softmax over nothing);
// every other empty axis gives an empty or well-defined result, never a read.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

using namespace xattn;
using Catch::Contains;

namespace {
testing::rng r(14);
}

TEST_CASE("E14 no queries (Sq = 0) gives an empty result", "[errors][empty]") {
  const xt::xtensor<float, 3> q = xt::zeros<float>({2, 0, 4}), k = r.tensor<float>({2, 7, 4}),
                              v = r.tensor<float>({2, 7, 5});
  auto Q = ref(q), K = ref(k), V = ref(v);
  for (int threads : {1, 2}) {
    const xt::xtensor<float, 3> out = eval(softmax(mask(Q * trans(K), causal())) * V, {16, 16, threads});
    REQUIRE(out.shape() == std::array<std::size_t, 3>{2, 0, 5});
  }
  const xt::xtensor<float, 3> w = eval(softmax(Q * trans(K)));
  REQUIRE(w.shape() == std::array<std::size_t, 3>{2, 0, 7});
  // raw outputs with the strides torch gives empty tensors: (1, 2, 0, 5) is (0, 0, 5, 1) and its
  // (1, 2, 0) lse (0, 0, 1); strides that would alias elements, had there been any
  float none[1] = {0};
  eval_with_lse_into(softmax(Q * trans(K)) * V, none, {2, 1, 0, 5}, {0, 0, 5, 1}, none, {2, 1, 0}, {0, 0, 1});
  REQUIRE(layout<3>{{2, 1, 0}, {0, 0, 1}}.unique());
  REQUIRE(!layout<3>{{2, 1, 1}, {0, 0, 1}}.unique());
}

TEST_CASE("E15 an empty batch (B = 0) gives an empty result", "[errors][empty]") {
  const xt::xtensor<float, 4> q = xt::zeros<float>({0, 2, 3, 4}), k = xt::zeros<float>({0, 1, 7, 4}),
                              v = xt::zeros<float>({0, 1, 7, 5});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<float, 4> out = eval(softmax(score(gaussian{1.0}, Q, K)) * V, {16, 16, 2});
  REQUIRE(out.shape() == std::array<std::size_t, 4>{0, 2, 3, 5});
}

TEST_CASE("E16 no keys (Skv = 0) is an error for scores given as a tensor too", "[errors][empty]") {
  const xt::xtensor<float, 3> x = xt::zeros<float>({2, 3, 0}), v = xt::zeros<float>({2, 0, 5});
  auto X = ref(x), V = ref(v);
  REQUIRE_THROWS_WITH(eval(softmax(X) * V), Contains("there are no keys (Skv = 0)"));
  REQUIRE_THROWS_WITH(eval(softmax(X)), Contains("Skv = 0"));
}

TEST_CASE("E17 zero-sized heads (Dq = Dk = 0): every score is 0, the output is the mean of V", "[errors][empty]") {
  const xt::xtensor<float, 3> q = xt::zeros<float>({1, 3, 0}), k = xt::zeros<float>({1, 6, 0});
  const xt::xtensor<float, 3> v = r.tensor<float>({1, 6, 2});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<float, 3> out = eval(softmax(Q * trans(K) / 0.5) * V, {2, 16, 1});
  for (std::size_t d = 0; d < 2; ++d) {
    double mean = 0;
    for (std::size_t j = 0; j < 6; ++j) mean += v(0, j, d) / 6.0;
    for (std::size_t i = 0; i < 3; ++i) REQUIRE(out(0, i, d) == Approx(mean).margin(1e-6));
  }
}

TEST_CASE("E18 zero-sized values (Dv = 0) give a result with an empty last axis", "[errors][empty]") {
  const xt::xtensor<double, 3> q = r.tensor<double>({2, 3, 4}), k = r.tensor<double>({2, 5, 4}),
                               v = xt::zeros<double>({2, 5, 0});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<double, 3> out = eval(softmax(Q * trans(K)) * V, {2, 3, 2});
  REQUIRE(out.shape() == std::array<std::size_t, 3>{2, 3, 0});
}
