// Catalogue E01-E13: operands whose shapes do not fit together. Extends tests/eval/entry/test_errors.cpp
// (which has the dot-product head size, lens length/rank/range, 2-D mask and bias broadcast,
// V key count, batch and GQA ratio cases); every message must name the argument and the shapes.
#include "hardening/isolated.hpp"
#include "hardening/message.hpp"
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

using namespace xattn;
using Catch::Contains;

namespace {
testing::rng r(11);
const xt::xtensor<float, 3> q = r.tensor<float>({2, 3, 4}), k = r.tensor<float>({2, 10, 4}),
                            v = r.tensor<float>({2, 10, 5});
const xt::xtensor<float, 3> k6 = r.tensor<float>({2, 10, 6});
}  // namespace

TEST_CASE("E01 every separable scorer names itself and both shapes on a head size mismatch", "[errors]") {
  auto Q = ref(q), K = ref(k6), V = ref(v);
  const std::string msgs[] = {
      hardening::invalid_argument_message([&] { eval(softmax(score(scaled_dot{}, Q, K)) * V); }),
      hardening::invalid_argument_message([&] { eval(softmax(score(cosine{1.0}, Q, K)) * V); }),
      hardening::invalid_argument_message([&] { eval(softmax(score(gaussian{1.0}, Q, K)) * V); })};
  const char* names[] = {"scaled_dot scores", "cosine{temperature}", "gaussian{sigma}"};
  for (std::size_t n = 0; n < 3; ++n)
    CHECK_THAT(msgs[n], Contains(names[n]) && Contains("queries have size 4 but keys have size 6") &&
                            Contains("Q (2,3,4)") && Contains("K (2,10,6)"));
  // the weights-only path (reference evaluator) validates the same way
  REQUIRE_THROWS_AS(eval(softmax(score(scaled_dot{}, Q, K))), std::invalid_argument);
}

TEST_CASE("E02 values with a different batch than the keys", "[errors]") {
  const xt::xtensor<float, 3> v1 = r.tensor<float>({1, 10, 5});
  auto Q = ref(q), K = ref(k), V = ref(v1);
  REQUIRE_THROWS_WITH(eval(softmax(Q * trans(K)) * V),
                      Contains("values V (1,10,5) do not match the keys (2,10,4)") && Contains("same batch (2)"));
}

TEST_CASE("E03 values with a different number of heads than the keys", "[errors]") {
  const xt::xtensor<float, 4> q4 = r.tensor<float>({1, 4, 3, 8}), k4 = r.tensor<float>({1, 2, 5, 8}),
                              v4 = r.tensor<float>({1, 4, 5, 8});
  auto Q = ref(q4), K = ref(k4), V = ref(v4);
  REQUIRE_THROWS_WITH(
      eval(softmax(Q * trans(K)) * V),
      Contains("values V (1,4,5,8) have 4 heads; they must match the 2 key heads") && Contains("(1,2,5,8)"));
}

TEST_CASE("E04 keys with zero heads", "[errors]") {
  const xt::xtensor<float, 4> q4 = r.tensor<float>({1, 2, 3, 8}), k0 = xt::zeros<float>({1, 0, 5, 8});
  auto Q = ref(q4), K = ref(k0);
  REQUIRE_THROWS_WITH(eval(softmax(Q * trans(K))),
                      Contains("2 query heads are not a multiple of the 0 key heads") && Contains("K (1,0,5,8)"));
}

TEST_CASE("E05 lens of rank 0", "[errors]") {
  const xt::xarray<int> scalar = 3;
  REQUIRE_THROWS_WITH(lengths(scalar),
                      Contains("lengths(lens): lens must have rank 1 (batch) or 2 (batch, queries), got shape ()"));
}

TEST_CASE("E06 a 2-D lens entry out of range is named by its flat index", "[errors]") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<int, 2> lens = {{1, 2, 3}, {4, 11, 0}};
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(K), lengths(lens))) * V),
                      Contains("lens[flat 4] = 11 is outside [0, 10]") && Contains("lens shape (2,3)"));
}

TEST_CASE("E07 unsigned lens too large for int64 are reported after conversion (as negative)", "[errors]") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<std::uint64_t, 1> lens = {3, std::numeric_limits<std::uint64_t>::max()};
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(K), lengths(lens))) * V),
                      Contains("lens[1] = -1 is outside [0, 10]"));
}

TEST_CASE("E08 a 4-D bool mask with the wrong number of heads", "[errors]") {
  const xt::xtensor<float, 4> q4 = r.tensor<float>({2, 2, 3, 4}), k4 = r.tensor<float>({2, 2, 10, 4});
  const xt::xtensor<bool, 4> m = xt::ones<bool>({2, 3, 3, 10});
  auto Q = ref(q4), K = ref(k4);
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(K), bool_mask(m)))),
                      Contains("bool_mask(mask): shape (2,3,3,10) does not broadcast to the scores (2,2,3,10)"));
}

TEST_CASE("E09 a bias of higher rank than the scores, and a scalar bias", "[errors]") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<float, 4> b4 = xt::zeros<float>({2, 1, 3, 10});  // rank-3 scores (2,3,10) have no head axis
  REQUIRE_THROWS_WITH(eval(softmax(Q * trans(K) + bias(b4)) * V),
                      Contains("bias(tensor): shape (2,1,3,10) does not broadcast to the scores (2,3,10)"));
  const xt::xarray<float> b0 = 1.0f;
  REQUIRE_THROWS_WITH(eval(softmax(Q * trans(K) + bias(b0)) * V),
                      Contains("bias(tensor): shape () does not broadcast"));
}

TEST_CASE("E10 heads() with zero heads or a rank-4 tensor", "[errors]") {
  xt::xtensor<float, 3> x = xt::zeros<float>({2, 3, 8});
  REQUIRE_THROWS_WITH(heads(x, 0), Contains("heads(x, 0)") && Contains("(2,3,8) is not divisible by 0 heads"));
  xt::xarray<float> x4 = xt::zeros<float>({2, 2, 3, 8});
  REQUIRE_THROWS_WITH(heads(x4, 2), Contains("heads(x, 2): x must have rank 3") && Contains("(2,2,3,8)"));
}

TEST_CASE("E11 ref() of a rank-5 tensor", "[errors]") {
  xt::xarray<float> x = xt::zeros<float>({1, 2, 3, 4, 5});
  REQUIRE_THROWS_WITH(ref(x), Contains("ref(): expected a tensor of rank 3") && Contains("(1,2,3,4,5)"));
}

// Regression (fixed in 2c24e43): resolve() skipped the V head check for the tensor-score base and
// the fused worker indexed V by score head -- with fewer V heads it read past V's storage. Run in
// a child process so that a regression crashes the child, not the suite (or an ASan run).
TEST_CASE("E12 scores given as a tensor with fewer value heads than score heads", "[errors][regression]") {
  const auto o = hardening::isolated([] {
    testing::rng g(12);
    const xt::xtensor<float, 4> x = g.tensor<float>({1, 4, 3, 3}), v2 = g.tensor<float>({1, 2, 3, 2});
    auto X = ref(x), V = ref(v2);
    const auto e = softmax(X) * V;
    const xt::xtensor<float, 4> got = eval(e, {64, 128, 1});
    if (testing::max_abs_diff(got, reference(e).output) > 1e-6)
      throw std::runtime_error("fused differs from reference");
  });
  INFO(o.describe());
  // either rejected with a message naming V, or computed like the reference (V head h / 2)
  REQUIRE((o.kind == hardening::outcome::returned ||
           (o.threw_invalid_argument() && o.message.find("values V") != std::string::npos)));
}

// Regression (fixed in 2c24e43): with head size 0 (Dq = Dk = 0), V of 4 heads is accepted against 2
// key heads (the check is skipped when q_dim == 0); fused and reference used different V heads.
TEST_CASE("E13 zero-sized heads with more value heads than key heads: rejected or consistent", "[errors][regression]") {
  const xt::xtensor<float, 4> q0 = xt::zeros<float>({1, 4, 3, 0}), k0 = xt::zeros<float>({1, 2, 3, 0});
  const xt::xtensor<float, 4> v4 = r.tensor<float>({1, 4, 3, 2});
  auto Q = ref(q0), K = ref(k0), V = ref(v4);
  const auto e = softmax(Q * trans(K)) * V;
  try {
    const xt::xtensor<float, 4> got = eval(e, {64, 128, 1});
    REQUIRE(testing::max_abs_diff(got, reference(e).output) < 1e-6);  // accepted: at least consistent
  } catch (const std::invalid_argument& ex) {
    REQUIRE_THAT(ex.what(), Contains("values V (1,4,3,2) have 4 heads"));
  }
}
