// grad(e, f, d_out) of score(policy, Q, K): every built-in policy (analytic members) and user
// policies differentiated on the tape (a separable one, a combine one, one with operator() only,
// and their learnables) -- dQ, dK, dV and learnables against the double reference's gradients
// (forward mode), the policy's parameter gradients (g.dscore) against central finite differences
// of the reference forward, and bitwise the same for 1 and 2 threads.
#include "catalogue/cosine_temperature.hpp"
#include "catalogue/laplace_kernel.hpp"
#include "support/bitwise.hpp"
#include "support/random.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <array>
#include <cmath>
#include <span>

using namespace xattn;
using testing::bitwise_equal;
using testing::max_abs_diff;

namespace {

// User policies written generically (unqualified math), with no derivative written anywhere: the
// catalogue's cosine_with_temperature (operator() only: pairs of raw rows) and laplace_kernel
// (projections + combine), and a separable one with terms only.
struct user_weighted_sum {  // separable with terms only (d2l's vector-summation exercise, weighted)
  static constexpr bool separable = true;
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += T(double(d + 1) / 4) * (q[d] * q[d] + k[d]);
    return s;
  }
  std::size_t feature_size(std::size_t, std::size_t) const { return 0; }
  template <class T>
  T project_query(std::span<const T> q, std::span<T>) const {
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += T(double(d + 1) / 4) * q[d] * q[d];
    return s;
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T>) const {
    T s = 0;
    for (std::size_t d = 0; d < k.size(); ++d) s += T(double(d + 1) / 4) * k[d];
    return s;
  }
};

struct user_weighted_dot {  // separable with features and learnable weights: Σ_d w_d q_d k_d
  static constexpr bool separable = true;
  std::array<learnable<>, 3> w{0.5, -1.0, 2.0};

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += T(w[d]) * q[d] * k[d];
    return s;
  }
  std::size_t feature_size(std::size_t dq, std::size_t) const { return dq; }
  template <class T>
  T project_query(std::span<const T> q, std::span<T> f) const {
    for (std::size_t d = 0; d < q.size(); ++d) f[d] = T(w[d]) * q[d];
    return 0;
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T> f) const {
    std::copy(k.begin(), k.end(), f.begin());
    return 0;
  }
  auto parameters() const { return std::tie(w); }
};

/// grad(make(policy)) against reference_grad; 1 and 2 threads bitwise. Returns the gradients.
template <class Make, class P, class D>
auto check_inputs(const Make& make, const P& policy, const D& d_out, double tol) {
  const auto e = make(policy);
  const auto f = eval_with_lse(e);
  schedule sch{12, 16, 1};
  const auto g = grad(e, f, d_out, sch);
  const auto want = reference_grad(make_plan(e), xt::xtensor<double, 4>(xt::cast<double>(d_out)));
  INFO(explain(e));
  CHECK(max_abs_diff(g.dq, want.dq) < tol);
  CHECK(max_abs_diff(g.dk, want.dk) < tol);
  CHECK(max_abs_diff(g.dv, want.dv) < tol);
  sch.threads = 2;
  const auto g2 = grad(e, f, d_out, sch);
  CHECK(bitwise_equal(g.dq, g2.dq));
  CHECK(bitwise_equal(g.dk, g2.dk));
  CHECK(bitwise_equal(g.dv, g2.dv));
  if constexpr (std::is_same_v<std::decay_t<decltype(g.dscore)>, learned_gradients>) {
    REQUIRE(g.dscore.size() == want.dscore.size());
    for (std::size_t n = 0; n < want.dscore.size(); ++n)  // sums over every pair: relative
      CHECK(std::abs(g.dscore[n] - want.dscore[n]) < tol * (1 + std::abs(want.dscore[n])));
    CHECK(bitwise_equal(g.dscore.d, g2.dscore.d));
  }
  return g;
}

/// The loss sum(d_out ∘ output) of the reference forward of make(policy).
template <class Make, class P>
double loss(const Make& make, const P& policy, const xt::xtensor<double, 4>& d_out) {
  return xt::sum(reference(make(policy)).output * d_out)();
}

/// Central difference of the loss along a parameter that `with(h)` perturbs by h.
template <class Make, class With>
double fd(const Make& make, const With& with, const xt::xtensor<double, 4>& d_out) {
  const double h = 1e-6;
  return (loss(make, with(h), d_out) - loss(make, with(-h), d_out)) / (2 * h);
}

}  // namespace

TEMPLATE_TEST_CASE("grad: built-in and user scoring policies against the reference backward", "", float, double) {
  using T = TestType;
  const double tol = std::is_same_v<T, float> ? 3e-5 : 1e-11;
  testing::rng rng(31);
  auto q = rng.tensor<T>({2, 2, 13, 3}), k = rng.tensor<T>({2, 2, 21, 3}), v = rng.tensor<T>({2, 2, 21, 4});
  auto k5 = rng.tensor<T>({2, 2, 21, 5});
  const auto d_out = rng.tensor<T>({2, 2, 13, 4});
  const auto Q = ref(q), K = ref(k), K5 = ref(k5), V = ref(v);
  xt::xtensor<int, 1> lens{0, 17};  // batch 0 fully masked: uniform weights, gradient to V only
  auto lengths_of = [&](const auto& policy) { return softmax(mask(score(policy, Q, K), lengths(lens))) * V; };
  auto causal_of = [&](const auto& policy) { return softmax(mask(score(policy, Q, K), causal())) * V; };

  SECTION("additive, queries and keys of different sizes") {
    const xt::xtensor<double, 2> wq = rng.tensor<double>({4, 3}), wk = rng.tensor<double>({4, 5});
    const xt::xtensor<double, 1> wv = rng.tensor<double>({4});
    auto make = [&](const additive& p) { return softmax(mask(score(p, Q, K5), lengths(lens))) * V; };
    check_inputs(make, additive{wq, wk, wv}, d_out, tol);
  }
  SECTION("bilinear") {
    check_inputs(causal_of, bilinear{xt::xtensor<double, 2>(rng.tensor<double>({3, 3}))}, d_out, tol);
  }
  SECTION("gaussian") { check_inputs(lengths_of, gaussian{0.8}, d_out, tol); }
  SECTION("cosine") { check_inputs(causal_of, cosine{0.3}, d_out, tol); }
  SECTION("scaled_dot") { check_inputs(lengths_of, scaled_dot{}, d_out, tol); }
  SECTION("a user policy with operator() only") {
    check_inputs(causal_of, dsl::cosine_with_temperature{0.7}, d_out, tol);
  }
  SECTION("a user policy with operator() only, zero key rows: lanes that branch apart") {
    // cosine_with_temperature returns 0 where a norm is 0: in a batch of keys holding a zero row the
    // lanes disagree (divergent_lanes), and the backward takes that batch pair by pair
    auto kz = k;
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t h = 0; h < 2; ++h) xt::view(kz, b, h, xt::keep(2, 18), xt::all()) = T(0);
    const auto KZ = ref(kz);
    auto make = [&](const auto& p) { return softmax(mask(score(p, Q, KZ), lengths(lens))) * V; };
    const auto g = check_inputs(make, dsl::cosine_with_temperature{0.7}, d_out, tol);
    CHECK(xt::amax(xt::abs(xt::view(g.dk, xt::all(), xt::all(), 2, xt::all())))() == 0);  // the branch's constant 0
    CHECK(xt::amax(xt::abs(g.dq))() > 1e-3);                                              // not vacuous
  }
  SECTION("a user combine policy") { check_inputs(lengths_of, dsl::laplace_kernel{1.5}, d_out, tol); }
  SECTION("a user separable policy with terms only") { check_inputs(causal_of, user_weighted_sum{}, d_out, tol); }
  SECTION("a user separable policy with learnable weights") {
    const auto g = check_inputs(lengths_of, user_weighted_dot{}, d_out, tol);
    CHECK(std::abs(g.dscore[2]) > 1e-3);  // not vacuous
  }
}

TEST_CASE("grad: scoring-policy parameter gradients against finite differences") {
  testing::rng rng(32);
  auto q = rng.tensor<double>({2, 2, 7, 3}), k = rng.tensor<double>({2, 2, 9, 3}), v = rng.tensor<double>({2, 2, 9, 2});
  auto k5 = rng.tensor<double>({2, 2, 9, 5});
  const xt::xtensor<double, 4> d_out = rng.tensor<double>({2, 2, 7, 2});
  const auto Q = ref(q), K = ref(k), K5 = ref(k5), V = ref(v);
  xt::xtensor<int, 2> lens{{3, 0, 9, 1, 2, 5, 4}, {9, 8, 0, 2, 6, 1, 3}};  // 2-D, zeros included
  // FD of a smooth O(1) loss with h = 1e-6: error O(h²) + O(ε/h) ~ 1e-10; gradients are accumulated
  // in double from double features
  const double tol = 1e-8;

  SECTION("additive: d_w_q, d_w_k, d_w_v") {
    const xt::xtensor<double, 2> wq = rng.tensor<double>({4, 3}), wk = rng.tensor<double>({4, 5});
    const xt::xtensor<double, 1> wv = rng.tensor<double>({4});
    auto make = [&](const additive& p) { return softmax(mask(score(p, Q, K5), lengths(lens))) * V; };
    const auto e = make(additive{wq, wk, wv});
    const auto g = grad(e, eval_with_lse(e), d_out);
    double worst = 0;
    for (std::size_t n = 0; n < wq.size(); ++n) {
      const double d = fd(
          make,
          [&](double h) {
            auto w = wq;
            w.flat(n) += h;
            return additive{w, wk, wv};
          },
          d_out);
      worst = std::max(worst, std::abs(d - g.dscore.d_w_q.flat(n)));
    }
    for (std::size_t n = 0; n < wk.size(); ++n) {
      const double d = fd(
          make,
          [&](double h) {
            auto w = wk;
            w.flat(n) += h;
            return additive{wq, w, wv};
          },
          d_out);
      worst = std::max(worst, std::abs(d - g.dscore.d_w_k.flat(n)));
    }
    for (std::size_t n = 0; n < wv.size(); ++n) {
      const double d = fd(
          make,
          [&](double h) {
            auto w = wv;
            w.flat(n) += h;
            return additive{wq, wk, w};
          },
          d_out);
      worst = std::max(worst, std::abs(d - g.dscore.d_w_v.flat(n)));
    }
    INFO("worst |analytic - finite difference| " << worst);
    CHECK(worst < tol);
    CHECK(xt::amax(xt::abs(g.dscore.d_w_v))() > 1e-3);  // not vacuous
  }
  SECTION("bilinear: d_w") {
    const xt::xtensor<double, 2> w = rng.tensor<double>({3, 3});
    auto make = [&](const bilinear& p) { return softmax(mask(score(p, Q, K), lengths(lens))) * V; };
    const auto e = make(bilinear{w});
    const auto g = grad(e, eval_with_lse(e), d_out);
    double worst = 0;
    for (std::size_t n = 0; n < w.size(); ++n) {
      const double d = fd(
          make,
          [&](double h) {
            auto x = w;
            x.flat(n) += h;
            return bilinear{x};
          },
          d_out);
      worst = std::max(worst, std::abs(d - g.dscore.d_w.flat(n)));
    }
    CHECK(worst < tol);
  }
  SECTION("gaussian: d_sigma, and cosine: d_temperature") {
    auto make_g = [&](const gaussian& p) { return softmax(mask(score(p, Q, K), lengths(lens))) * V; };
    const auto eg = make_g(gaussian{0.9});
    const double dg = grad(eg, eval_with_lse(eg), d_out).dscore.d_sigma;
    CHECK(std::abs(dg - fd(
                            make_g, [](double h) { return gaussian{0.9 + h}; }, d_out)) < tol);
    CHECK(std::abs(dg) > 1e-3);
    auto make_c = [&](const cosine& p) { return softmax(mask(score(p, Q, K), causal())) * V; };
    const auto ec = make_c(cosine{0.4});
    const double dc = grad(ec, eval_with_lse(ec), d_out).dscore.d_temperature;
    CHECK(std::abs(dc - fd(
                            make_c, [](double h) { return cosine{0.4 + h}; }, d_out)) < tol);
    CHECK(std::abs(dc) > 1e-3);
  }
  SECTION("user policies' learnables, no derivative written: pairs, projections and combine") {
    auto make_t = [&](const dsl::cosine_with_temperature& p) { return softmax(mask(score(p, Q, K), causal())) * V; };
    const auto et = make_t({0.6});
    const double dt = grad(et, eval_with_lse(et), d_out).dscore[0];
    CHECK(std::abs(dt - fd(
                            make_t, [](double h) { return dsl::cosine_with_temperature{0.6 + h}; }, d_out)) < tol);
    CHECK(std::abs(dt) > 1e-3);
    auto make_l = [&](const dsl::laplace_kernel& p) { return softmax(mask(score(p, Q, K), lengths(lens))) * V; };
    const auto el = make_l({1.3});
    const double dl = grad(el, eval_with_lse(el), d_out).dscore[0];
    CHECK(std::abs(dl - fd(
                            make_l, [](double h) { return dsl::laplace_kernel{1.3 + h}; }, d_out)) < tol);
    CHECK(std::abs(dl) > 1e-3);
    auto make_w = [&](const user_weighted_dot& p) { return softmax(mask(score(p, Q, K), lengths(lens))) * V; };
    const auto ew = make_w({});
    const auto gw = grad(ew, eval_with_lse(ew), d_out).dscore;
    REQUIRE(gw.size() == 3);
    for (std::size_t n = 0; n < 3; ++n) {
      const double d = fd(
          make_w,
          [n](double h) {
            user_weighted_dot p;
            p.w[n].value += h;
            return p;
          },
          d_out);
      CHECK(std::abs(d - gw[n]) < tol);
    }
  }
}
