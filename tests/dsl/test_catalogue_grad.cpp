// The catalogue's user policies and modifier trained without a derivative written anywhere:
// grad() (the fused backward, differentiating them on xattn::dual) against central finite
// differences of the reference forward, element by element of Q, K and V.
#include "catalogue/cosine_temperature.hpp"
#include "catalogue/laplace_kernel.hpp"
#include "catalogue/relative_bias.hpp"
#include "catalogue/vector_sum.hpp"
#include "support/random.hpp"

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

}  // namespace

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
