// Every built-in scorer's fast decomposition (projections + dot or combine) equals its plain
// definition operator()(q, k), which is what the reference evaluator uses.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <span>

using namespace xattn;

namespace {

/// The score by the policy's projections and dot product (separable) or combine: the kernel's
/// decomposition, computed independently of operator(). Every built-in scorer has one, so the
/// comparison below never compares operator() with itself.
template <class P>
double decomposed(const P& p, std::span<const double> q, std::span<const double> k) {
  static_assert(projects_in<P, double>, "every built-in scorer declares projections");
  const std::size_t n = p.feature_size(q.size(), k.size());
  std::vector<double> fq(n), fk(n);
  const double a = p.project_query(q, std::span<double>(fq)), b = p.project_key(k, std::span<double>(fk));
  double s = 0;
  if constexpr (separable<P>())
    for (std::size_t d = 0; d < n; ++d) s += fq[d] * fk[d];
  else
    s = p.combine(std::span<const double>(fq), std::span<const double>(fk));
  return s + a + b;
}

template <class P>
void check(const P& p, std::size_t dq, std::size_t dk) {
  testing::rng r(dq * 31 + dk);
  for (int t = 0; t < 20; ++t) {
    const auto q = r.tensor<double>({dq}, -2, 2), k = r.tensor<double>({dk}, -2, 2);
    const std::span<const double> qs(q.data(), dq), ks(k.data(), dk);
    REQUIRE(decomposed(p, qs, ks) == Approx(p(qs, ks)).margin(1e-12));
  }
}

}  // namespace

TEST_CASE("built-in scorers: projections agree with the definition") {
  testing::rng r(1);
  check(dot{}, 7, 7);
  check(scaled_dot{}, 9, 9);
  check(additive{r.tensor<float>({6, 5}), r.tensor<float>({6, 3}), r.tensor<float>({6})}, 5, 3);
  check(additive{r.tensor<float>({33, 5}), r.tensor<float>({33, 4}), r.tensor<float>({33})}, 5, 4);  // > one batch
  check(bilinear{r.tensor<double>({4, 6})}, 4, 6);
  check(gaussian{0.7}, 5, 5);
  check(cosine{0.5}, 8, 8);
}

TEST_CASE("scorer closed forms") {
  const std::vector<double> q = {1, 2, 2}, k = {2, 0, 1};
  const std::span<const double> qs(q), ks(k);
  REQUIRE(dot{}(qs, ks) == 4);
  REQUIRE(scaled_dot{}(qs, ks) == Approx(4 / std::sqrt(3.0)));
  REQUIRE(gaussian{2.0}(qs, ks) == Approx(-(1.0 + 4 + 1) / 8));
  REQUIRE(cosine{1.0}(qs, ks) == Approx(4 / (3 * std::sqrt(5.0))));
  const std::vector<double> zero = {0, 0, 0};
  REQUIRE(cosine{1.0}(std::span<const double>(zero), ks) == 0);  // no NaN for a zero vector
}

TEST_CASE("scorers validate their sizes with the shapes in the message") {
  testing::rng r(2);
  REQUIRE_THROWS_WITH(additive(r.tensor<float>({6, 5}), r.tensor<float>({6, 3}), r.tensor<float>({6})).validate(4, 3),
                      Catch::Contains("W_q is (6,5)") && Catch::Contains("queries have size 4"));
  REQUIRE_THROWS_WITH(bilinear{r.tensor<double>({4, 6})}.validate(4, 5), Catch::Contains("W has shape (4,6)"));
  REQUIRE_THROWS_AS(gaussian{0.0}.validate(2, 2), std::invalid_argument);
  REQUIRE_THROWS_AS(cosine{-1.0}.validate(2, 2), std::invalid_argument);
}

TEMPLATE_TEST_CASE("additive: the saved backward equals the recomputing one", "[gradient]", float, double) {
  // what the fused backward uses (combine_saving, combine_backward_saved) against combine and
  // combine_backward, which evaluate tanh themselves: the same bits, over whole batches and a tail
  testing::rng r(5);
  for (std::size_t h : {std::size_t(64), std::size_t(13)}) {
    const additive p{r.tensor<float>({h, 4}), r.tensor<float>({h, 4}), r.tensor<float>({h})};
    static_assert(combines_saved_in<additive, TestType>);
    const auto fq = r.tensor<TestType>({h}, -2, 2), fk = r.tensor<TestType>({h}, -2, 2);
    const std::span<const TestType> q(fq.data(), h), k(fk.data(), h);
    std::vector<TestType> t(p.combine_saved_size(h));
    REQUIRE(t.size() == h);
    CHECK(p.combine_saving(q, k, std::span<TestType>(t)) == p.combine(q, k));
    const double eps = std::is_same_v<TestType, float> ? 1e-6 : 1e-14;  // xsimd's tanh against std's
    for (std::size_t i = 0; i < h; ++i) CHECK(t[i] == Approx(std::tanh(fq[i] + fk[i])).epsilon(eps).margin(eps));
    std::vector<TestType> dq1(h, 0.5), dk1(h, -0.25), dw1(h, 1), dq2 = dq1, dk2 = dk1, dw2 = dw1;
    p.combine_backward(q, k, TestType(0.75), std::span<TestType>(dq1), std::span<TestType>(dk1),
                       std::span<TestType>(dw1));
    p.combine_backward_saved(std::span<const TestType>(t), TestType(0.75), std::span<TestType>(dq2),
                             std::span<TestType>(dk2), std::span<TestType>(dw2));
    CHECK(dq1 == dq2);
    CHECK(dk1 == dk2);
    CHECK(dw1 == dw2);
    CHECK(dq1 != std::vector<TestType>(h, 0.5));  // it did add something
  }
}
