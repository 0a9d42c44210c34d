// The seeds' worked examples, through the dsl/ programs exactly as the demo runs them.
#include "d2l_additive_attention.hpp"
#include "d2l_dot_product_attention.hpp"
#include "d2l_masked_softmax.hpp"
#include "seeds_example.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xtensor/xrandom.hpp>

using Catch::Matchers::WithinAbs;

namespace {

const xt::xtensor<float, 3> d2l_expected = {{{2, 3, 4, 5}}, {{10, 11, 12, 13}}};

template <class T>
void require_equal(const T& got, const xt::xtensor<float, 3>& want, double tol) {
  REQUIRE(got.shape() == want.shape());
  for (std::size_t n = 0; n < want.size(); ++n) REQUIRE_THAT(got.flat(n), WithinAbs(want.flat(n), tol));
}

}  // namespace

TEST_CASE("d2l DotProductAttention worked example gives [[2,3,4,5]], [[10,11,12,13]]") {
  const dsl::seeds_example ex;
  require_equal(dsl::dot_product_attention(ex.dot_queries, ex.keys, ex.values, ex.valid_lens), d2l_expected, 1e-5);
  // d2l draws the queries from normal(0, 1): with equal keys every query gives the same result.
  xattn::testing::rng r(7);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 1, 2}, -3, 3);
  require_equal(dsl::dot_product_attention(q, ex.keys, ex.values, ex.valid_lens), d2l_expected, 1e-5);
  const auto w = dsl::dot_product_weights(q, ex.keys, ex.valid_lens);
  for (std::size_t j = 0; j < 10; ++j) {
    CHECK_THAT(w(0, 0, j), WithinAbs(j < 2 ? 0.5 : 0.0, 1e-7));
    CHECK_THAT(w(1, 0, j), WithinAbs(j < 6 ? 1.0 / 6 : 0.0, 1e-7));
  }
}

TEST_CASE("d2l AdditiveAttention worked example gives [[2,3,4,5]], [[10,11,12,13]]") {
  const dsl::seeds_example ex;
  xattn::testing::rng r(11);
  // any weights: equal keys make the scores equal, so the weights are uniform over valid keys
  const xt::xtensor<float, 2> w_q = r.tensor<float>({8, 20}), w_k = r.tensor<float>({8, 2});
  const xt::xtensor<float, 1> w_v = r.vector<float>(8);
  require_equal(dsl::additive_attention(ex.add_queries, ex.keys, ex.values, ex.valid_lens, w_q, w_k, w_v), d2l_expected,
                1e-4);
}

TEST_CASE("d2l masked_softmax: zeros beyond each length, rows sum to 1") {
  xattn::testing::rng r(3);
  const xt::xtensor<float, 3> x = r.tensor<float>({2, 2, 4}, 0, 1);
  auto check = [&](const auto& w, auto len) {
    REQUIRE(w.shape() == x.shape());
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t i = 0; i < 2; ++i) {
        const std::size_t n = len(b, i);
        double sum = 0, ez = 0;
        for (std::size_t j = 0; j < n; ++j) ez += std::exp(double(x(b, i, j)));
        for (std::size_t j = 0; j < 4; ++j) {
          sum += w(b, i, j);
          if (j >= n)
            REQUIRE(w(b, i, j) == 0.0f);  // exactly: exp(-1e6 - m) underflows
          else
            REQUIRE_THAT(w(b, i, j), WithinAbs(std::exp(double(x(b, i, j))) / ez, 1e-6));
        }
        REQUIRE_THAT(sum, WithinAbs(1.0, 1e-6));
      }
  };
  const xt::xtensor<int, 1> l1 = {2, 3};
  check(dsl::masked_softmax(x, l1), [&](std::size_t b, std::size_t) { return std::size_t(l1(b)); });
  const xt::xtensor<int, 2> l2 = {{1, 3}, {2, 4}};
  check(dsl::masked_softmax(x, l2), [&](std::size_t b, std::size_t i) { return std::size_t(l2(b, i)); });
}

TEST_CASE("d2l masked_softmax: a zero length gives a uniform row, as -1e6 filling does") {
  const xt::xtensor<float, 3> x = {{{1, 5, -2, 0}}};
  const auto w = dsl::masked_softmax(x, xt::xtensor<int, 1>{0});
  for (std::size_t j = 0; j < 4; ++j) REQUIRE_THAT(w(0, 0, j), WithinAbs(0.25, 1e-7));
}
