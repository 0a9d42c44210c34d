// Policies written for float, for double or as templates: their capabilities are detected in the
// type they accept (a double-only combine runs on the pair_features path with float tensors),
// sizes are checked by default, and a user policy's errors read like the built-ins'.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <span>

using namespace xattn;
using testing::max_abs_diff;

namespace {

/// A Laplace kernel written only for double spans: projections and combine.
struct laplace_double {
  double bandwidth = 2.0;
  double operator()(std::span<const double> q, std::span<const double> k) const {
    double s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s -= std::abs(q[d] - k[d]);
    return s / bandwidth;
  }
  std::size_t feature_size(std::size_t dq, std::size_t) const { return dq; }
  double project_query(std::span<const double> q, std::span<double> f) const {
    for (std::size_t d = 0; d < q.size(); ++d) f[d] = q[d] / bandwidth;
    return 0;
  }
  double project_key(std::span<const double> k, std::span<double> f) const { return project_query(k, f); }
  double combine(std::span<const double> a, std::span<const double> b) const {
    double s = 0;
    for (std::size_t d = 0; d < a.size(); ++d) s -= std::abs(a[d] - b[d]);
    return s;
  }
};

/// A float-only score operator, used with double tensors.
struct product_float {
  float operator()(std::span<const float> q, std::span<const float> k) const { return q[0] * k[0] + q[1] * k[1]; }
};

/// A user mask whose bind() reports through xattn::fail, as the built-ins do.
struct every_other {
  std::size_t period = 2;
  bool visible(std::size_t, std::size_t, std::size_t, std::size_t j) const { return j % period == 0; }
  every_other bind(const problem& pr) const {
    if (period == 0 || period > pr.kv_len)
      fail("every_other(period): period ", period, " is outside [1, ", pr.kv_len, "]");
    return *this;
  }
};

}  // namespace

TEST_CASE("a double-only combine is found and runs on the pair_features path with float tensors") {
  using term = tensor_ref<float, 3>;
  STATIC_REQUIRE(combines_in<laplace_double, double>);
  STATIC_REQUIRE(!combines_in<laplace_double, float>);
  STATIC_REQUIRE(path_name_v<policy_base<laplace_double, term, term>> == "pair_features");
  STATIC_REQUIRE(std::is_same_v<pair_features_path<float, policy_base<laplace_double, term, term>>::S, double>);
  testing::rng r(1);
  const xt::xtensor<float, 3> q = r.tensor<float>({2, 9, 5}), k = r.tensor<float>({2, 21, 5}),
                              v = r.tensor<float>({2, 21, 3});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(score(laplace_double{}, Q, K)) * V;
  REQUIRE(explain(e).path == "pair_features");
  REQUIRE(max_abs_diff(eval(e, {4, 8, 2}), xt::view(reference(e).output, xt::all(), 0)) < 2e-6);
  const auto w = softmax(score(laplace_double{}, Q, K));  // weights: the same kernel
  REQUIRE(max_abs_diff(eval(w), xt::view(reference(w).weights, xt::all(), 0)) < 2e-6);
}

TEST_CASE("a float-only policy runs with double tensors, in float") {
  using term = tensor_ref<double, 3>;
  STATIC_REQUIRE(std::is_same_v<score_scalar_t<product_float, double>, float>);
  STATIC_REQUIRE(path_name_v<policy_base<product_float, term, term>, double> == "pair_raw");
  testing::rng r(2);
  const xt::xtensor<double, 3> q = r.tensor<double>({1, 6, 2}), k = r.tensor<double>({1, 8, 2}),
                               v = r.tensor<double>({1, 8, 2});
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(score(product_float{}, Q, K)) * V;
  REQUIRE(max_abs_diff(eval(e), xt::view(reference(e).output, xt::all(), 0)) < 1e-12);
}

TEST_CASE("a policy without validate() gets the equal-size check: no read past the shorter row") {
  testing::rng r(3);
  const xt::xtensor<float, 3> q = r.tensor<float>({1, 4, 3}), k = r.tensor<float>({1, 6, 5}),
                              v = r.tensor<float>({1, 6, 2});
  auto Q = ref(q), K = ref(k), V = ref(v);
  auto qk = [](auto a, auto b) {
    decltype(a[0] * b[0]) s = 0;
    for (std::size_t d = 0; d < b.size(); ++d) s += a[d] * b[d];  // reads b.size() elements of a
    return s;
  };
  REQUIRE_THROWS_WITH(eval(softmax(score(qk, Q, K)) * V),
                      "xattn: score(policy, Q, K): queries have size 3 but keys have size 5; a policy that accepts "
                      "different sizes declares validate(dq, dk) [Q (1,4,3), K (1,6,5)]");
  REQUIRE_THROWS_AS(eval(softmax(score(qk, Q, K))), std::invalid_argument);
  REQUIRE_THROWS_AS(reference(softmax(score(qk, Q, K)) * V), std::invalid_argument);
}

TEST_CASE("xattn::fail: a user policy's error reads like a built-in's") {
  testing::rng r(4);
  const xt::xtensor<float, 3> q = r.tensor<float>({1, 4, 3}), v = r.tensor<float>({1, 4, 2});
  auto Q = ref(q), V = ref(v);
  REQUIRE_THROWS_WITH(eval(softmax(mask(Q * trans(Q), every_other{9})) * V),
                      "xattn: every_other(period): period 9 is outside [1, 4]");
  const auto out = eval(softmax(mask(Q * trans(Q), every_other{2})) * V);
  REQUIRE(max_abs_diff(out, xt::view(reference(softmax(mask(Q * trans(Q), every_other{2})) * V).output, xt::all(), 0)) <
          1e-6);
}

TEST_CASE("the policy checks, as concepts") {
  STATIC_REQUIRE(scoring_policy<dot>);
  STATIC_REQUIRE(scoring_policy<laplace_double>);
  STATIC_REQUIRE(!scoring_policy<every_other>);
  STATIC_REQUIRE(mask_policy<every_other>);
  STATIC_REQUIRE(mask_policy<causal_mask>);
  STATIC_REQUIRE(!mask_policy<dot>);
  STATIC_REQUIRE(score_modifier<softcap_op>);
  STATIC_REQUIRE(!score_modifier<causal_mask>);
  STATIC_REQUIRE(has_classify<documents_mask>);
  STATIC_REQUIRE(has_hide_row<documents_mask, float>);
}
