// Every run-time misuse throws std::invalid_argument naming the argument and the shapes.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

using namespace xattn;
using Catch::Contains;

namespace {
testing::rng r(1);
const xt::xtensor<float, 3> q = r.tensor<float>({2, 3, 4}), k = r.tensor<float>({2, 10, 4}),
                            v = r.tensor<float>({2, 10, 5});
}  // namespace

TEST_CASE("mismatched head size between Q and K") {
  const xt::xtensor<float, 3> k5 = r.tensor<float>({2, 10, 5});
  auto Q = ref(q), K = ref(k5), V = ref(v);
  REQUIRE_THROWS_AS(eval(softmax(Q * trans(K)) * V), std::invalid_argument);
  REQUIRE_THROWS_WITH(eval(softmax(Q * trans(K)) * V), Contains("queries have size 4 but keys have size 5") &&
                                                           Contains("Q (2,3,4)") && Contains("K (2,10,5)"));
}

TEST_CASE("lens of the wrong length or rank") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(K), lengths(xt::xtensor<int, 1>{1, 2, 3}))) * V),
                      Contains("lengths(lens)") && Contains("(3)") && Contains("(2)") && Contains("(2,3)"));
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(K), lengths(xt::xtensor<int, 2>{{1, 2}, {3, 4}}))) * V),
                      Contains("lens has shape (2,2)") && Contains("(2,3,10)"));
  REQUIRE_THROWS_WITH(lengths(xt::xtensor<int, 3>::from_shape({1, 1, 1})), Contains("rank 1") && Contains("(1,1,1)"));
}

TEST_CASE("lens greater than Skv, and negative lens") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(K), lengths(xt::xtensor<int, 1>{1, 11}))) * V),
                      Contains("lens[1] = 11") && Contains("[0, 10]"));
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(K), lengths(xt::xtensor<int, 1>{-1, 2}))) * V),
                      Contains("lens[0] = -1"));
}

TEST_CASE("masks and biases that do not broadcast") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<bool, 2> m = xt::ones<bool>({3, 9});
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(K), bool_mask(m))) * V),
                      Contains("bool_mask(mask): shape (3,9) does not broadcast to the scores (2,3,10)"));
  const xt::xtensor<float, 2> b = xt::ones<float>({4, 10});
  REQUIRE_THROWS_WITH(eval(softmax(Q * trans(K) + bias(b)) * V), Contains("bias(tensor): shape (4,10)"));
}

TEST_CASE("values that do not match the keys") {
  const xt::xtensor<float, 3> v9 = r.tensor<float>({2, 9, 5});
  auto Q = ref(q), K = ref(k), V = ref(v9);
  REQUIRE_THROWS_WITH(eval(softmax(Q * trans(K)) * V), Contains("values V (2,9,5)") && Contains("keys (2,10,4)"));
}

TEST_CASE("batch mismatch and grouped-query head ratio") {
  const xt::xtensor<float, 3> q1 = r.tensor<float>({1, 3, 4});
  auto Q = ref(q1), K = ref(k), V = ref(v);
  REQUIRE_THROWS_WITH(eval(softmax(Q * trans(K)) * V), Contains("different batch sizes") && Contains("Q (1,3,4)"));
  const xt::xtensor<float, 4> q3 = r.tensor<float>({1, 3, 2, 4}), k2 = r.tensor<float>({1, 2, 5, 4});
  auto Q3 = ref(q3), K2 = ref(k2);
  REQUIRE_THROWS_WITH(eval(softmax(Q3 * trans(K2))), Contains("3 query heads are not a multiple of the 2 key heads"));
}

TEST_CASE("bad policy arguments") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  REQUIRE_THROWS_WITH(eval(softmax(softcap(Q * trans(K), 0.0)) * V), Contains("softcap(scores, c)"));
  REQUIRE_THROWS_WITH(eval(softmax(alibi(Q * trans(K), {1.0, 2.0})) * V),
                      Contains("slopes has 2 entries") && Contains("1 query heads"));
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(K), window(-1, 2))) * V), Contains("window(left, right)"));
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(K), causal_offsets(std::vector<int>{1, 2, 3}))) * V),
                      Contains("causal_offsets(o): o has 3 entries but the batch is 2"));
}

TEST_CASE("no keys at all") {
  const xt::xtensor<float, 3> k0 = xt::zeros<float>({2, 0, 4}), v0 = xt::zeros<float>({2, 0, 5});
  auto Q = ref(q), K = ref(k0), V = ref(v0);
  REQUIRE_THROWS_WITH(eval(softmax(Q * trans(K)) * V), Contains("Skv = 0"));
}

TEST_CASE("ref of a tensor of the wrong rank") {
  xt::xarray<float> a = xt::zeros<float>({2, 3});
  REQUIRE_THROWS_WITH(ref(a), Contains("rank 3") && Contains("(2,3)"));
}

TEST_CASE("an operand whose element count overflows size_t is named") {
  // a raw pointer with strides can claim any shape; each operand is checked before its sizes are read
  const std::size_t huge = std::size_t(1) << 62;
  auto Q = ref(q), K = ref(k);
  const auto V = ref(v.data(), {2, 1, 10, huge}, {0, 0, 0, 1});
  REQUIRE_THROWS_WITH(eval(softmax(Q * trans(K)) * V),
                      Contains("values V (2,1,10,4611686018427387904): the number of elements overflows size_t"));
  const auto K2 = ref(k.data(), {2, 1, huge, 4}, {0, 0, 0, 1});
  REQUIRE_THROWS_WITH(eval(softmax(ref(q) * trans(K) + ref(q) * trans(K2)) * ref(v)),
                      Contains("keys K2 (2,1,4611686018427387904,4): the number of elements overflows size_t"));
}
