// The recorded score path end to end: scoring functions written plainly against their hand-separated
// built-in forms and the double reference, forward and backward, with their learnables against
// finite differences; the three forms (separated, pair by pair on lanes, the policy itself) named
// by explain; pairs whose guards fail (zero rows for cosine), masks, grouped heads and decoding.
#include "catalogue/cosine_temperature.hpp"
#include "catalogue/laplace_kernel.hpp"
#include "catalogue/plain_scores.hpp"
#include "catalogue/weighted_dot.hpp"
#include "support/random.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>

using namespace xattn;
using Catch::Matchers::Contains;

namespace {

template <class A, class B>
double worst(const A& a, const B& b) {
  REQUIRE(a.size() == b.size());
  double w = 0;
  for (std::size_t n = 0; n < a.size(); ++n) w = std::max(w, std::abs(double(a.flat(n)) - double(b.flat(n))));
  return w;
}

/// grad(e) against the double reference's gradients, and its output against the reference's.
template <class E>
void check_against_reference(const E& e, const xt::xtensor<double, 4>& d_out, double tol) {
  const auto f = eval_with_lse(e);
  const auto want = reference(e);
  CHECK(worst(f.output, want.output) < tol);
  const auto g = grad(e, f, d_out);
  const auto rg = reference_grad(make_plan(e), d_out);
  CHECK(worst(g.dq, rg.dq) < tol);
  CHECK(worst(g.dk, rg.dk) < tol);
  CHECK(worst(g.dv, rg.dv) < tol);
}

/// Every learnable of `owner` (copied into the expression make() builds): grad's g.dscore (or its
/// first modifier's g.dmodify) against the central difference of the reference loss
/// sum(d_out ∘ output).
template <class Make, class Owner>
double worst_parameter_error(const Make& make, Owner& owner, const xt::xtensor<double, 4>& d_out,
                             bool modifier = false) {
  const auto g = grad(make(), eval_with_lse(make()), d_out);
  const parameter_slots slots(owner);
  const learned_gradients got = [&] {
    if constexpr (requires { g.dscore.d; })
      if (!modifier) return g.dscore;
    REQUIRE(g.dmodify.size() == 1);
    return g.dmodify[0];
  }();
  REQUIRE(got.size() == slots.size());
  const auto loss = [&] { return xt::sum(reference(make()).output * d_out)(); };
  double w = 0, largest = 0;
  for (std::size_t n = 0; n < slots.size(); ++n) {
    auto& x = *const_cast<learnable<>*>(static_cast<const learnable<>*>(slots.address(n)));
    const double x0 = x.value, h = 1e-6;
    x.value = x0 + h;
    const double up = loss();
    x.value = x0 - h;
    const double down = loss();
    x.value = x0;
    w = std::max(w, std::abs((up - down) / (2 * h) - got[n]));
    largest = std::max(largest, std::abs(got[n]));
  }
  CHECK(largest > 1e-3);  // not vacuous
  return w;
}

/// Cosine with sqrt qualified: the value leaves the recording, so the policy runs itself.
struct qualified_cosine {
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T qk = 0, qq = 0, kk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) qk += q[d] * k[d], qq += q[d] * q[d], kk += k[d] * k[d];
    return qq * kk == 0 ? T(0) : qk / std::sqrt(qq * kk);
  }
};

/// A leaky ReLU of the dot product with a guard on the pair's value: it stays per pair (about half
/// the pairs take the other branch, by the policy).
struct leaky_dot {
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T qk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) qk += q[d] * k[d];
    return qk > T(0) ? qk : T(0.1) * qk;
  }
};

/// The largest feature difference: a per-pair remainder per feature, in no sum.
struct largest_difference {
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::abs, std::max;
    T m = abs(q[0] - k[0]);
    for (std::size_t d = 1; d < q.size(); ++d) m = max(m, abs(q[d] - k[d]));
    return -m;
  }
};

/// q·k/4 − Σ_d (d + 2)/16 · |q_d − k_d|: a product and a feature map whose body reads a constant
/// per feature.
struct l1_and_dot {
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::abs;
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += q[d] * k[d] * T(0.25) - T(double(d + 2) / 16) * abs(q[d] - k[d]);
    return s;
  }
};

/// A modifier reading five learnables per score: more than a param_dual holds, so each score's
/// learnables go back on the tape instead.
struct five_weights {
  std::array<learnable<>, 5> w{0.1, -0.2, 0.3, 0.05, -0.15};
  template <class U>
  U operator()(U s, std::size_t, std::size_t, std::size_t i, std::size_t j) const {
    U t = s;
    for (std::size_t n = 0; n < 5; ++n) t += U(w[n]) * U(double((i + j + n) % 3));
    return t;
  }
  auto parameters() const { return std::tie(w); }
};

/// A modifier reading one learnable per score: a slope per head times the distance.
struct learned_slopes {
  std::array<learnable<>, 2> slope{0.3, -0.2};
  template <class U>
  U operator()(U s, std::size_t, std::size_t h, std::size_t i, std::size_t j) const {
    using std::tanh;
    return s + tanh(U(slope[h]) * U(double(i) - double(j)));
  }
  auto parameters() const { return std::tie(slope); }
};

}  // namespace

TEST_CASE("recorded: a modifier's learnables from one evaluation each (param_dual), or the tape past it") {
  testing::rng r(15);
  auto q = r.tensor<double>({1, 2, 5, 4}), k = r.tensor<double>({1, 2, 7, 4}), v = r.tensor<double>({1, 2, 7, 3});
  const xt::xtensor<double, 4> d_out = r.tensor<double>({1, 2, 5, 3});
  const auto Q = ref(q), K = ref(k), V = ref(v);
  SECTION("one learnable per score") {
    learned_slopes m;
    CHECK(worst_parameter_error([&] { return softmax(modify(Q * trans(K), m)) * V; }, m, d_out, true) < 1e-8);
  }
  SECTION("five per score") {
    five_weights m;
    CHECK(worst_parameter_error([&] { return softmax(mask(modify(Q * trans(K), m), causal())) * V; }, m, d_out, true) <
          1e-8);
  }
}

TEST_CASE("recorded: plain scores equal their hand-separated forms, forward and backward") {
  testing::rng r(11);
  const std::size_t D = 6;
  auto q = r.tensor<double>({2, 2, 9, D}), k = r.tensor<double>({2, 2, 13, D}), v = r.tensor<double>({2, 2, 13, 5});
  const xt::xtensor<double, 4> d_out = r.tensor<double>({2, 2, 9, 5});
  const auto Q = ref(q), K = ref(k), V = ref(v);
  const auto same = [&](const auto& plain, const auto& built_in, const char* path) {
    INFO(path);
    const auto e = softmax(mask(plain, causal(align::bottom_right))) * V;
    const auto b = softmax(mask(built_in, causal(align::bottom_right))) * V;
    CHECK(explain(e).path == "recorded");
    CHECK_THAT(explain(e).text, Contains(path));
    const auto fe = eval_with_lse(e), fb = eval_with_lse(b);
    CHECK(worst(fe.output, fb.output) < 1e-12);
    const auto ge = grad(e, fe, d_out), gb = grad(b, fb, d_out);
    CHECK(worst(ge.dq, gb.dq) < 1e-11);
    CHECK(worst(ge.dk, gb.dk) < 1e-11);
    CHECK(worst(ge.dv, gb.dv) < 1e-11);
    return std::pair{ge.dscore, gb.dscore};
  };
  SECTION("Gaussian") {
    const auto [a, b] = same(score(dsl::gaussian_score{1.3}, Q, K), score(gaussian{1.3}, Q, K), "8 features");
    CHECK(std::abs(a[0] - b.d_sigma) < 1e-10);
  }
  SECTION("cosine with a temperature, as written") {
    const auto [a, b] =
        same(score(dsl::cosine_with_temperature{0.4}, Q, K), score(cosine{0.4}, Q, K), "per pair nothing");
    CHECK(std::abs(a[0] - b.d_temperature) < 1e-10);
  }
  SECTION("bilinear") {
    dsl::bilinear_score p;
    p.cols = D;
    xt::xtensor<double, 2> w = xt::xtensor<double, 2>::from_shape({D, D});
    for (std::size_t n = 0; n < D * D; ++n) p.w.push_back(w.flat(n) = std::sin(0.7 * double(n)));
    const auto [a, b] =
        same(score(p, Q, K), score(bilinear(w), Q, K), "per query row 0 operations, 6 outputs a product by a matrix");
    for (std::size_t n = 0; n < D * D; ++n) CHECK(std::abs(a[n] - b.d_w.flat(n)) < 1e-10);
  }
  SECTION("weighted dot product") {
    dsl::weighted_dot_score p;
    dsl::weighted_dot h;
    for (std::size_t d = 0; d < D; ++d) p.w.push_back(1 + 0.2 * double(d)), h.w.push_back(1 + 0.2 * double(d));
    const auto [a, b] = same(score(p, Q, K), score(h, Q, K), "6 features");
    for (std::size_t d = 0; d < D; ++d) CHECK(std::abs(a[d] - b[d]) < 1e-10);
  }
  SECTION("Laplace kernel: a feature map") {
    const auto [a, b] = same(score(dsl::laplace_score{1.7}, Q, K), score(dsl::laplace_kernel{1.7}, Q, K),
                             "a feature map over 6 features, 2 operations per feature and pair");
    CHECK(std::abs(a[0] - b[0]) < 1e-10);
  }
}

TEST_CASE("recorded: the learnables of plain scores against finite differences") {
  testing::rng r(12);
  auto q = r.tensor<double>({1, 2, 5, 4}), k = r.tensor<double>({1, 2, 7, 4}), v = r.tensor<double>({1, 2, 7, 3});
  const xt::xtensor<double, 4> d_out = r.tensor<double>({1, 2, 5, 3});
  const auto Q = ref(q), K = ref(k), V = ref(v);
  const double tol = 1e-8;  // central differences, h = 1e-6: O(h²) + O(ε/h)
  SECTION("folded: the Gaussian width in the row programs") {
    dsl::gaussian_score p{0.9};
    CHECK(worst_parameter_error([&] { return softmax(score(p, Q, K)) * V; }, p, d_out) < tol);
  }
  SECTION("separated: weights in the query program") {
    dsl::weighted_dot_score p;
    for (int d = 0; d < 4; ++d) p.w.push_back(0.5 + 0.3 * d);
    CHECK(worst_parameter_error([&] { return softmax(mask(score(p, Q, K), causal())) * V; }, p, d_out) < tol);
  }
  SECTION("folded: the cosine's temperature in the query rows") {
    dsl::cosine_with_temperature p{0.7};
    CHECK(worst_parameter_error([&] { return softmax(score(p, Q, K)) * V; }, p, d_out) < tol);
  }
  SECTION("a feature map: the Laplace bandwidth") {
    dsl::laplace_score p{1.2};
    CHECK(worst_parameter_error([&] { return softmax(score(p, Q, K)) * V; }, p, d_out) < tol);
  }
}

TEST_CASE("recorded: pairs whose guards fail take the policy's own branch") {
  testing::rng r(13);
  auto q = r.tensor<double>({1, 2, 20, 8}), k = r.tensor<double>({1, 2, 37, 8}), v = r.tensor<double>({1, 2, 37, 4});
  for (std::size_t d = 0; d < 8; ++d) q(0, 0, 3, d) = q(0, 1, 19, d) = k(0, 0, 5, d) = k(0, 1, 36, d) = 0;
  const xt::xtensor<double, 4> d_out = r.tensor<double>({1, 2, 20, 4});
  const auto e = softmax(score(dsl::cosine_with_temperature{0.3}, ref(q), ref(k))) * ref(v);
  REQUIRE_THAT(explain(e).text, Contains("2 row guards"));
  check_against_reference(e, d_out, 1e-12);
  // float: the same to float rounding
  const xt::xtensor<float, 4> qf = xt::cast<float>(q), kf = xt::cast<float>(k), vf = xt::cast<float>(v);
  const auto ef = softmax(score(dsl::cosine_with_temperature{0.3}, ref(qf), ref(kf))) * ref(vf);
  CHECK(worst(eval(ef), reference(e).output) < 2e-5);
  // whole tiles (plain: P and dS from the products' epilogues) beside tiles with a zero row or key
  auto q2 = r.tensor<double>({1, 2, 96, 8}), k2 = r.tensor<double>({1, 2, 320, 8}),
       v2 = r.tensor<double>({1, 2, 320, 4});
  for (std::size_t d = 0; d < 8; ++d) q2(0, 1, 70, d) = k2(0, 0, 300, d) = 0;
  const auto e2 = softmax(score(dsl::cosine_with_temperature{0.3}, ref(q2), ref(k2))) * ref(v2);
  REQUIRE_THAT(explain(e2, schedule{}, with_backward).text, Contains("dP and dS: "));
  check_against_reference(e2, r.tensor<double>({1, 2, 96, 4}), 1e-12);
  // a guard per pair
  const auto l = softmax(mask(score(leaky_dot{}, ref(q), ref(k)), causal())) * ref(v);
  REQUIRE_THAT(explain(l).text, Contains("1 guards (pairs failing one"));
  check_against_reference(l, d_out, 1e-12);
}

TEST_CASE("recorded: the three forms, with masks, grouped heads and decoding") {
  testing::rng r(14);
  const xt::xtensor<int, 1> lens{9, 4};
  auto q = r.tensor<double>({2, 4, 6, 10}), k = r.tensor<double>({2, 2, 11, 10}), v = r.tensor<double>({2, 2, 11, 3});
  const xt::xtensor<double, 4> d_out = r.tensor<double>({2, 4, 6, 3});
  const auto Q = ref(q), K = ref(k), V = ref(v);
  SECTION("separated") {
    const auto e = softmax(mask(score(dsl::gaussian_score{2.0}, Q, K), lengths(lens))) * V;
    CHECK_THAT(explain(e).text, Contains("12 features per row by the score microkernel"));
    check_against_reference(e, d_out, 1e-11);
  }
  SECTION("a feature map with a weight per feature, a product beside it") {
    const auto e = softmax(mask(score(l1_and_dot{}, Q, K), lengths(lens))) * V;
    CHECK_THAT(explain(e).text, Contains("10 features per row") && Contains("a feature map over 10 features"));
    check_against_reference(e, d_out, 1e-11);
  }
  SECTION("pair by pair on lanes") {
    const auto e = softmax(mask(score(largest_difference{}, Q, K), causal())) * V;
    CHECK_THAT(explain(e).text, Contains("the recording pair by pair on lanes"));
    check_against_reference(e, d_out, 1e-11);
  }
  SECTION("the policy itself: a value left the recording") {
    const auto e = softmax(mask(score(qualified_cosine{}, Q, K), causal())) * V;
    CHECK_THAT(explain(e).text, Contains("a value left the recorded code"));
    const auto f = eval(e);
    CHECK(worst(f, reference(e).output) < 1e-12);
  }
  SECTION("decoding: one query against keys read in place") {
    const auto q1 = r.tensor<double>({2, 4, 1, 10});
    const auto e = softmax(score(dsl::cosine_with_temperature{0.5}, ref(q1), K)) * V;
    CHECK(worst(eval(e), reference(e).output) < 1e-12);
    const xt::xtensor<float, 4> qf = xt::cast<float>(q1), kf = xt::cast<float>(k), vf = xt::cast<float>(v);
    const auto ef = softmax(score(dsl::cosine_with_temperature{0.5}, ref(qf), ref(kf))) * ref(vf);
    CHECK(worst(eval(ef), reference(e).output) < 2e-5);
  }
}
