// The catalogue's user policies and pipelines against closed forms and the reference evaluator.
#include "catalogue/band_mask.hpp"
#include "catalogue/causal_alibi.hpp"
#include "catalogue/cosine_temperature.hpp"
#include "catalogue/nadaraya_watson.hpp"
#include "catalogue/vector_sum.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

using namespace xattn;
using xattn::testing::max_abs_diff;

TEST_CASE("cosine-with-temperature user policy: fused equals reference, weights follow the closed form") {
  testing::rng r(21);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 7, 5}), k = r.tensor<float>({2, 19, 5}),
                              v = r.tensor<float>({2, 19, 3});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(score(dsl::cosine_with_temperature{0.2}, Q, K)) * V;
  const auto ref_r = reference(e);
  const xt::xtensor<float, 3> out = eval(e);
  REQUIRE(max_abs_diff(xt::view(ref_r.output, xt::all(), 0), out) < 1e-5);
  // closed form of one weight
  const auto w = eval(softmax(score(dsl::cosine_with_temperature{0.2}, Q, K)));
  double z = 0;
  auto cosv = [&](std::size_t j) {
    double qk = 0, qq = 0, kk = 0;
    for (std::size_t d = 0; d < 5; ++d) {
      qk += q(1, 3, d) * k(1, j, d);
      qq += q(1, 3, d) * q(1, 3, d);
      kk += k(1, j, d) * k(1, j, d);
    }
    return qk / std::sqrt(qq * kk) / 0.2;
  };
  for (std::size_t j = 0; j < 19; ++j) z += std::exp(cosv(j));
  REQUIRE_THAT(w(1, 3, 4), Catch::Matchers::WithinAbs(std::exp(cosv(4)) / z, 1e-6));
}

TEST_CASE("vector-sum scores: the weights do not depend on the query") {
  testing::rng r(5);
  const xt::xtensor<double, 3> q = r.tensor<double>({1, 4, 6}), k = r.tensor<double>({1, 9, 6}),
                               v = r.tensor<double>({1, 9, 2});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto w = eval(softmax(score(dsl::vector_sum{}, Q, K)));
  for (std::size_t i = 1; i < 4; ++i)
    for (std::size_t j = 0; j < 9; ++j) REQUIRE(std::abs(w(0, i, j) - w(0, 0, j)) < 1e-14);
  const auto e = softmax(score(dsl::vector_sum{}, Q, K)) * V;
  REQUIRE(max_abs_diff(xt::view(reference(e).output, xt::all(), 0), eval(e)) < 1e-12);
}

TEST_CASE("band mask user policy: skips blocks, equals the reference with tiny blocks") {
  testing::rng r(9);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 2, 100, 16}), k = r.tensor<float>({1, 2, 100, 16}),
                              v = r.tensor<float>({1, 2, 100, 8});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(Q * trans(K) / 4.0, dsl::band_mask{3})) * V;
  const auto want = reference(e).output;
  for (std::size_t bk : {16, 32, 128}) REQUIRE(max_abs_diff(want, eval(e, {8, bk, 1})) < 2e-6);
}

TEST_CASE("causal + ALiBi pipeline equals the reference") {
  testing::rng r(13);
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 4, 33, 8}), k = r.tensor<float>({2, 4, 33, 8}),
                              v = r.tensor<float>({2, 4, 33, 8});
  const auto out = dsl::causal_alibi_attention(q, k, v);
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto want =
      reference(softmax(mask(alibi(Q * trans(K) / std::sqrt(8.0f), alibi_op::standard_slopes(4)), causal())) * V)
          .output;
  REQUIRE(max_abs_diff(want, out) < 2e-6);
  // first query attends only to the first key
  for (std::size_t d = 0; d < 8; ++d) REQUIRE(out(1, 2, 0, d) == Approx(v(1, 2, 0, d)).margin(1e-6));
}

TEST_CASE("Nadaraya-Watson with a Gaussian kernel matches the closed form") {
  xt::xtensor<double, 3> x = {{{0.0}, {1.0}, {3.0}}}, y = {{{1.0}, {2.0}, {5.0}}}, xq = {{{0.5}}};
  const auto f = dsl::nadaraya_watson(xq, x, y, 1.0);
  double num = 0, den = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const double w = std::exp(-(0.5 - x(0, i, 0)) * (0.5 - x(0, i, 0)) / 2);
    num += w * y(0, i, 0);
    den += w;
  }
  REQUIRE_THAT(f(0, 0, 0), Catch::Matchers::WithinAbs(num / den, 1e-12));
}
