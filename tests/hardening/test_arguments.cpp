// Catalogue E19-E28: invalid policy, modifier and schedule arguments. Extends
// tests/eval/entry/test_errors.cpp ("bad policy and schedule arguments": softcap 0, alibi slope count,
// negative window, block_q 0, causal_offsets length).
#include "hardening/isolated.hpp"
#include "hardening/message.hpp"
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

using namespace xattn;
using Catch::Contains;

namespace {
testing::rng r(19);
const xt::xtensor<float, 3> q = r.tensor<float>({2, 3, 4}), k = r.tensor<float>({2, 10, 4}),
                            v = r.tensor<float>({2, 10, 5});
constexpr double inf = std::numeric_limits<double>::infinity(), not_a_number = std::numeric_limits<double>::quiet_NaN();
}  // namespace

TEST_CASE("E19 softcap with a NaN, infinite or negative cap", "[errors]") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  CHECK_THAT(hardening::invalid_argument_message([&] { eval(softmax(softcap(Q * trans(K), not_a_number)) * V); }),
             Contains("softcap(scores, c): c must be finite and > 0, got nan"));
  CHECK_THAT(hardening::invalid_argument_message([&] { eval(softmax(softcap(Q * trans(K), inf)) * V); }),
             Contains("got inf"));
  CHECK_THAT(hardening::invalid_argument_message([&] { eval(softmax(softcap(Q * trans(K), -2.0))); }),
             Contains("got -2"));
}

// Regression (fixed in 9374fbc): window bounds were added to positions in int64 unchecked, so a
// bound near INT64_MAX overflowed (UB; it wrapped and hid every key of rows i >= 1). In a child
// process, so that a regression cannot take the suite (or a UBSan run) down.
TEST_CASE("E20 window bounds near INT64_MAX", "[errors][regression]") {
  const auto o = hardening::isolated([] {
    testing::rng g(20);
    const xt::xtensor<double, 3> q5 = g.tensor<double>({1, 5, 4}), k5 = g.tensor<double>({1, 5, 4});
    auto Q = ref(q5), K = ref(k5);
    const xt::xtensor<double, 3> w =
        eval(softmax(mask(Q * trans(K), window(0, std::numeric_limits<std::int64_t>::max()))));
    for (std::size_t i = 0; i < 5; ++i)
      for (std::size_t j = 0; j < 5; ++j)
        if ((w(0, i, j) > 0) != (j >= i)) throw std::runtime_error("window(0, INT64_MAX) is not 'every key j >= i'");
  });
  INFO(o.describe());
  REQUIRE((o.kind == hardening::outcome::returned || o.threw_invalid_argument()));
}

// ALiBi slopes are checked like softcap's, cosine's and gaussian's parameters.
TEST_CASE("E21 ALiBi slopes that are not finite", "[errors]") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  REQUIRE_THROWS_WITH(eval(softmax(alibi(Q * trans(K), std::vector<double>{not_a_number})) * V),
                      Contains("alibi(scores, slopes)"));
}

// `scores / c` with c = 0 would make every score infinite: the scale must be finite.
TEST_CASE("E22 dividing the scores by zero", "[errors]") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  REQUIRE_THROWS_AS(eval(softmax(Q * trans(K) / 0.0) * V), std::invalid_argument);
}

TEST_CASE("E23 cosine with a zero or NaN temperature", "[errors]") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  CHECK_THAT(
      hardening::invalid_argument_message([&] { eval(softmax(score(cosine{0.0}, Q, K)) * V); }),
      Contains("cosine{temperature}: temperature must be finite and > 0, got 0") && Contains("Q (2,3,4), K (2,10,4)"));
  CHECK_THAT(hardening::invalid_argument_message([&] { eval(softmax(score(cosine{not_a_number}, Q, K)) * V); }),
             Contains("got nan"));
}

TEST_CASE("E24 gaussian with a negative or infinite sigma", "[errors]") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  CHECK_THAT(hardening::invalid_argument_message([&] { eval(softmax(score(gaussian{-1.0}, Q, K)) * V); }),
             Contains("gaussian{sigma}: sigma must be finite and > 0, got -1") && Contains("Q (2,3,4)"));
  CHECK_THAT(hardening::invalid_argument_message([&] { eval(softmax(score(gaussian{inf}, Q, K)) * V); }),
             Contains("got inf"));
}

TEST_CASE("E25 bilinear weights of the wrong shape", "[errors]") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<double, 2> w = xt::ones<double>({4, 3});
  CHECK_THAT(hardening::invalid_argument_message([&] { eval(softmax(score(bilinear{w}, Q, K)) * V); }),
             Contains("bilinear{W}: W has shape (4,3) but queries have size 4 and keys size 4 (need W (4,4))") &&
                 Contains("K (2,10,4)"));
}

TEST_CASE("E26 additive weights of the wrong shape, and weights of rank 3", "[errors]") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  const xt::xtensor<float, 2> wq = xt::ones<float>({6, 4}), wk = xt::ones<float>({6, 5});
  const xt::xtensor<float, 1> wv = xt::ones<float>({6});
  CHECK_THAT(hardening::invalid_argument_message([&] {
               eval(softmax(score(additive{wq, wk, wv}, Q, K)) * V);
             }),
             Contains("additive{W_q, W_k, w_v}: W_q is (6,4), W_k is (6,5), w_v has 6 entries") &&
                 Contains("need W_q (h,4), W_k (h,4), w_v (h)"));
  const xt::xtensor<double, 3> w3 = xt::ones<double>({2, 2, 2});
  CHECK_THAT(hardening::invalid_argument_message([&] { bilinear{w3}; }),
             Contains("weights: expected a vector or a matrix, got shape (2,2,2)"));
}

// Regression (fixed in 9374fbc): tile buffers were sized from the schedule, not the problem:
// block_q = 2^40 threw std::bad_alloc inside the OpenMP region (std::terminate), and near SIZE_MAX
// the block count wrapped. Blocks are now clamped to the problem.
TEST_CASE("E27 schedule blocks far larger than the problem", "[errors][regression]") {
  for (const std::size_t huge : {std::size_t(1) << 40, std::numeric_limits<std::size_t>::max()}) {
    const auto o = hardening::isolated([huge] {
      testing::rng g(27);
      const xt::xtensor<float, 3> q5 = g.tensor<float>({1, 5, 4}), k5 = g.tensor<float>({1, 5, 4}),
                                  v5 = g.tensor<float>({1, 5, 4});
      auto Q = ref(q5), K = ref(k5), V = ref(v5);
      const auto e = softmax(Q * trans(K)) * V;
      const xt::xtensor<float, 3> out = eval(e, {huge, 128, 1});
      if (testing::max_abs_diff(out, xt::view(reference(e).output, xt::all(), 0)) > 1e-6)
        throw std::runtime_error("wrong result");
    });
    INFO("block_q = " << huge << ": " << o.describe());
    CHECK((o.kind == hardening::outcome::returned || o.threw_invalid_argument()));
  }
}

TEST_CASE("E28 a negative thread count means the OpenMP default", "[errors]") {
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(Q * trans(K), causal())) * V;
  const xt::xtensor<float, 3> neg = eval(e, {2, 16, -3}), one = eval(e, {2, 16, 1});
  const bool same = neg == one;  // bitwise: thread count never changes the result (see test_determinism)
  REQUIRE(same);
}
