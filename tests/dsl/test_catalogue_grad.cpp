// The catalogue's user policies and modifier trained without a derivative written anywhere:
// grad() (the fused backward, differentiating them on the tape) against central finite
// differences of the reference forward, element by element of Q, K, V and of their learnables.
#include "catalogue/cosine_temperature.hpp"
#include "catalogue/laplace_kernel.hpp"
#include "catalogue/relative_bias.hpp"
#include "catalogue/vector_sum.hpp"
#include "catalogue/weighted_dot.hpp"
#include "support/random.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/learnable.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

using namespace xattn;

namespace {

/// Every element of q, k and v: grad's gradient against (L(x + h) - L(x - h)) / 2h of the
/// reference loss L = sum(d_out ∘ output). Returns the worst difference.
template <class Make, class X>
double worst_fd_error(const Make& make, X& q, X& k, X& v, const xt::xtensor<double, 4>& d_out) {
  const auto e = make();
  const auto g = grad(e, eval_with_lse(e), d_out);
  auto loss = [&] { return xt::sum(reference(make()).output * d_out)(); };
  double worst = 0;
  auto check = [&](X& x, const xt::xtensor<double, 4>& gx) {
    REQUIRE(std::equal(gx.shape().begin(), gx.shape().end(), x.shape().begin(), x.shape().end()));
    const double h = 1e-6;
    for (std::size_t n = 0; n < x.size(); ++n) {
      const double x0 = x.flat(n);
      x.flat(n) = x0 + h;
      const double up = loss();
      x.flat(n) = x0 - h;
      const double down = loss();
      x.flat(n) = x0;
      worst = std::max(worst, std::abs((up - down) / (2 * h) - gx.flat(n)));
    }
  };
  check(q, g.dq);
  check(k, g.dk);
  check(v, g.dv);
  return worst;
}

/// Every learnable of `owner` (the policy or modifier make() copies into the expression): the
/// gradient `got` (grad's g.dscore or g.dmodify entry) against the central difference of the
/// reference loss. Returns the worst difference.
template <class Make, class Owner>
double worst_parameter_error(const Make& make, Owner& owner, const learned_gradients& got,
                             const xt::xtensor<double, 4>& d_out) {
  const parameter_slots slots(owner);
  REQUIRE(got.size() == slots.size());
  auto loss = [&] { return xt::sum(reference(make()).output * d_out)(); };
  double worst = 0, largest = 0;
  for (std::size_t n = 0; n < slots.size(); ++n) {
    auto& w = *const_cast<learnable<>*>(static_cast<const learnable<>*>(slots.address(n)));
    const double w0 = w.value, h = 1e-6;
    w.value = w0 + h;
    const double up = loss();
    w.value = w0 - h;
    const double down = loss();
    w.value = w0;
    worst = std::max(worst, std::abs((up - down) / (2 * h) - got[n]));
    largest = std::max(largest, std::abs(got[n]));
  }
  CHECK(largest > 1e-3);  // not vacuous
  return worst;
}

/// The catalogue's relative_bias, counting the rows its own backward ran.
struct counted_bias : dsl::relative_bias {
  std::size_t* calls = nullptr;

  template <class T>
  void backward_row(const T* s, T* g, std::size_t n, std::size_t b, std::size_t h, std::size_t i, std::size_t j0,
                    T* dp) const {
    ++*calls;
    relative_bias::backward_row(s, g, n, b, h, i, j0, dp);
  }
  counted_bias bind(const problem& pr) const {
    relative_bias::bind(pr);
    return *this;
  }
};

}  // namespace

TEST_CASE("a modifier's own backward of a row gives the oracle's gradients") {
  testing::rng r(17);
  const auto q = r.tensor<double>({1, 2, 7, 4}), k = r.tensor<double>({1, 2, 7, 4}), v = r.tensor<double>({1, 2, 7, 3});
  const xt::xtensor<double, 4> d_out = r.tensor<double>({1, 2, 7, 3});
  const auto Q = ref(q), K = ref(k), V = ref(v);
  std::size_t calls = 0;
  counted_bias rb;
  rb.radius = 2, rb.calls = &calls;
  for (int n = 0; n < 2 * 5; ++n) rb.table.push_back(0.3 * std::sin(n));
  const auto make = [&] { return softmax(mask(modify(Q * trans(K) / 2.0, rb), causal())) * V; };
  const auto got = grad(make(), eval_with_lse(make()), d_out);
  const auto want = reference_grad(make_plan(make()), d_out);  // forward mode, no backward_row
  CHECK(calls > 0);
  REQUIRE(got.dmodify.size() == 1);
  for (std::size_t n = 0; n < rb.table.size(); ++n) CHECK(std::abs(got.dmodify[0][n] - want.dmodify[0][n]) < 1e-12);
  CHECK(xt::amax(xt::abs(got.dq - want.dq))() < 1e-12);
  CHECK(xt::amax(xt::abs(got.dk - want.dk))() < 1e-12);
  CHECK(xt::amax(xt::abs(got.dv - want.dv))() < 1e-12);
}

TEST_CASE("catalogue: user policies and a user modifier differentiate by themselves (finite differences)") {
  testing::rng r(41);
  auto q = r.tensor<double>({2, 2, 5, 4}), k = r.tensor<double>({2, 2, 7, 4}), v = r.tensor<double>({2, 2, 7, 3});
  const xt::xtensor<double, 4> d_out = r.tensor<double>({2, 2, 5, 3});
  const auto Q = ref(q), K = ref(k), V = ref(v);
  xt::xtensor<int, 1> lens{6, 0};
  // central differences of a smooth O(1) loss, h = 1e-6: error O(h²) + O(ε/h) ~ 1e-10
  const double tol = 1e-8;
  SECTION("cosine with temperature (operator() only)") {
    CHECK(worst_fd_error([&] { return softmax(mask(score(dsl::cosine_with_temperature{0.5}, Q, K), causal())) * V; }, q,
                         k, v, d_out) < tol);
  }
  SECTION("d2l's vector-summation exercise (separable, terms only)") {
    CHECK(worst_fd_error([&] { return softmax(mask(score(dsl::vector_sum{}, Q, K), lengths(lens))) * V; }, q, k, v,
                         d_out) < tol);
  }
  SECTION("Laplace kernel (projections and combine)") {
    CHECK(worst_fd_error([&] { return softmax(mask(score(dsl::laplace_kernel{1.5}, Q, K), lengths(lens))) * V; }, q, k,
                         v, d_out) < tol);
  }
  SECTION("relative position bias (a modifier)") {
    dsl::relative_bias rb{{}, 2};
    for (int n = 0; n < 2 * 5; ++n) rb.table.push_back(0.3 * std::sin(n));
    CHECK(worst_fd_error([&] { return softmax(mask(modify(Q * trans(K) / 2.0, rb), causal())) * V; }, q, k, v, d_out) <
          tol);
  }
}

TEST_CASE("catalogue: the learnables of user policies and of a user modifier (finite differences)") {
  testing::rng r(43);
  auto q = r.tensor<double>({2, 2, 5, 4}), k = r.tensor<double>({2, 2, 7, 4}), v = r.tensor<double>({2, 2, 7, 3});
  const xt::xtensor<double, 4> d_out = r.tensor<double>({2, 2, 5, 3});
  const auto Q = ref(q), K = ref(k), V = ref(v);
  const double tol = 1e-8;  // as above
  SECTION("cosine's temperature (pairs on the tape)") {
    dsl::cosine_with_temperature p{0.5};
    const auto make = [&] { return softmax(mask(score(p, Q, K), causal())) * V; };
    const auto g = grad(make(), eval_with_lse(make()), d_out);
    CHECK(worst_parameter_error(make, p, g.dscore, d_out) < tol);
  }
  SECTION("learned feature weights (a separable policy's projections on the tape)") {
    dsl::weighted_dot p;
    for (int d = 0; d < 4; ++d) p.w.push_back(1.0 + 0.25 * d);
    const auto make = [&] { return softmax(mask(score(p, Q, K), causal())) * V; };
    const auto g = grad(make(), eval_with_lse(make()), d_out);
    CHECK(worst_parameter_error(make, p, g.dscore, d_out) < tol);
  }
  SECTION("Laplace kernel's bandwidth (projections and combine on the tape)") {
    dsl::laplace_kernel p{1.5};
    const auto make = [&] { return softmax(score(p, Q, K)) * V; };
    const auto g = grad(make(), eval_with_lse(make()), d_out);
    CHECK(worst_parameter_error(make, p, g.dscore, d_out) < tol);
  }
  SECTION("relative position bias's table (a modifier's learnables), after a bias tensor and a softcap") {
    dsl::relative_bias rb{{}, 2};
    for (int n = 0; n < 2 * 5; ++n) rb.table.push_back(0.3 * std::sin(n));
    const xt::xtensor<double, 1> key_bias = r.vector<double>(7);
    const auto make = [&] {
      return softmax(mask(modify(softcap(Q * trans(K) / 2.0 + bias(key_bias), 1.5), rb), causal())) * V;
    };
    const auto g = grad(make(), eval_with_lse(make()), d_out);
    REQUIRE(g.dmodify.size() == 1);
    CHECK(worst_parameter_error(make, rb, g.dmodify[0], d_out) < tol);
    // the reference oracle (forward mode, one seeded evaluation per entry) agrees
    const auto want = reference_grad(make_plan(make()), d_out);
    REQUIRE(want.dmodify.size() == 1);
    for (std::size_t n = 0; n < rb.table.size(); ++n) CHECK(std::abs(want.dmodify[0][n] - g.dmodify[0][n]) < 1e-12);
    // buckets of keys after the query (j - i > 0) are hidden by the causal mask: no gradient
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t b = 3; b < 5; ++b) CHECK(g.dmodify[0][h * 5 + b] == 0);
  }
}
