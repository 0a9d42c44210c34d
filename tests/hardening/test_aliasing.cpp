// Catalogue E30-E32: outputs and inputs that share memory, and terminal lifetimes.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

using namespace xattn;

namespace {
testing::rng r(30);
}

TEST_CASE("E30 assigning eval's result to one of its own inputs is safe: eval returns a new tensor",
          "[errors][aliasing]") {
  xt::xtensor<float, 3> q = r.tensor<float>({2, 9, 8});
  const xt::xtensor<float, 3> k = r.tensor<float>({2, 9, 8}), v = r.tensor<float>({2, 9, 8});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(mask(Q * trans(K), causal())) * V;
  const xt::xtensor<float, 3> fresh = eval(e, {4, 16, 2});
  q = eval(e, {4, 16, 2});  // Q views q: the kernel finishes reading before the assignment
  const bool same = q == fresh;
  REQUIRE(same);
}

TEST_CASE("E31 ref() of a temporary owns a copy, so the expression outlives the temporary", "[errors][aliasing]") {
  const xt::xtensor<double, 3> k = r.tensor<double>({1, 6, 4}), v = r.tensor<double>({1, 6, 3});
  xt::xtensor<double, 3> q = r.tensor<double>({1, 5, 4});
  auto Q = ref(xt::xtensor<double, 3>(q * 2.0));  // the temporary dies here
  REQUIRE(Q.owned != nullptr);
  auto Qv = ref(q);  // an lvalue is viewed in place: q must outlive Qv
  REQUIRE(Qv.owned == nullptr);
  auto K = ref(k), V = ref(v);
  q.fill(0);  // changes what Qv sees, not what Q owns
  const xt::xtensor<double, 3> from_copy = eval(softmax(Q * trans(K)) * V);
  const xt::xtensor<double, 3> from_zero = eval(softmax(Qv * trans(K)) * V);
  const bool differ = from_copy != from_zero;
  REQUIRE(differ);
  for (std::size_t d = 0; d < 3; ++d)  // zero queries: uniform weights, the mean of V
    REQUIRE(from_zero(0, 4, d) ==
            Approx((v(0, 0, d) + v(0, 1, d) + v(0, 2, d) + v(0, 3, d) + v(0, 4, d) + v(0, 5, d)) / 6));
}

// Regression (fixed in 9374fbc): eval_into writes rows while other tasks still read V in place, so
// an out overlapping V gave wrong results (max error 0.31); overlap is now rejected.
TEST_CASE("E32 eval_into with an output that overlaps the values", "[errors][aliasing][regression]") {
  const xt::xtensor<float, 3> q = r.tensor<float>({1, 64, 16}), k = r.tensor<float>({1, 64, 16});
  xt::xtensor<float, 3> v = r.tensor<float>({1, 64, 16});
  const xt::xtensor<float, 3> v0 = v;
  auto Q = ref(q), K = ref(k), V = ref(v), V0 = ref(v0);
  const xt::xtensor<float, 3> want = eval(softmax(Q * trans(K)) * V0, {8, 16, 1});
  bool rejected = false;
  try {
    eval_into(softmax(Q * trans(K)) * V, v, {8, 16, 1});
  } catch (const std::invalid_argument&) {
    rejected = true;
  }
  INFO("max difference to the non-aliased result: " << testing::max_abs_diff(v, want));
  REQUIRE((rejected || testing::max_abs_diff(v, want) < 1e-6));
}
