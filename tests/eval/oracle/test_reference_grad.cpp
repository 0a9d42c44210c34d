// The reference backward against central finite differences of the reference forward: the loss
// sum(d_out ∘ output) differentiated by every input element, for each node kind the backward
// handles (scale, modifiers by dual numbers, bias broadcast, masks filled and excluded, dropout,
// GQA, tensor scores, a user policy differentiated through its operator()).
#include "support/random.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <span>

using namespace xattn;

namespace {

// A user policy written generically (unqualified sqrt): cosine similarity over a temperature.
struct user_cosine {
  double tau = 0.5;
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::sqrt;
    T qk = 0, qq = 0, kk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) qk += q[d] * k[d], qq += q[d] * q[d], kk += k[d] * k[d];
    return qk / (sqrt(qq * kk) * T(tau));
  }
};

/// The loss sum(d_out ∘ output) (or ∘ weights) of the reference forward.
template <class Make>
double loss(const Make& make, const xt::xtensor<double, 4>& d_out) {
  const auto r = reference(make());
  const auto& y = r.output.size() ? r.output : r.weights;
  return xt::sum(y * d_out)();
}

/// Every element of t: analytic gradient g against (L(t + h) - L(t - h)) / 2h.
template <class Make, class T, class G>
void check_fd(const Make& make, T& t, const G& g, const xt::xtensor<double, 4>& d_out, const char* what) {
  REQUIRE(g.size() == t.size());
  const double h = 1e-6;
  double worst = 0;
  for (std::size_t n = 0; n < t.size(); ++n) {
    const double x = t.flat(n);
    t.flat(n) = x + h;
    const double up = loss(make, d_out);
    t.flat(n) = x - h;
    const double down = loss(make, d_out);
    t.flat(n) = x;
    worst = std::max(worst, std::abs((up - down) / (2 * h) - g.flat(n)));
  }
  INFO(what << ": worst |analytic - finite difference| " << worst);
  // central differences of a smooth loss of size O(1): truncation O(h²) and rounding O(ε/h) ~ 1e-10
  CHECK(worst < 1e-7);
}

template <class Make>
void check_all(const Make& make, xt::xarray<double>& q, xt::xarray<double>& k, xt::xarray<double>& v,
               std::uint64_t seed) {
  testing::rng rng(seed);
  const auto fwd = reference(make());
  xt::xtensor<double, 4> d_out = rng.tensor<double>({fwd.output.shape().begin(), fwd.output.shape().end()});
  const auto g = reference_grad(make_plan(make()), d_out);
  check_fd(make, q, g.dq, d_out, "dq");
  check_fd(make, k, g.dk, d_out, "dk");
  check_fd(make, v, g.dv, d_out, "dv");
}

}  // namespace

TEST_CASE("reference backward: dot product with scale, masks, modifiers and GQA against finite differences") {
  testing::rng rng(7);
  auto q = rng.tensor<double>({2, 4, 5, 3}), k = rng.tensor<double>({2, 2, 6, 3}), v = rng.tensor<double>({2, 2, 6, 2});
  const auto Q = ref(q), K = ref(k), V = ref(v);
  xt::xtensor<int, 1> lens{0, 4};  // a fully masked batch: uniform weights (gradient to V only)
  SECTION("scale and causal") {
    check_all([&] { return softmax(mask(Q * trans(K) / 1.5, causal())) * V; }, q, k, v, 1);
  }
  SECTION("lengths with a zero length") {
    check_all([&] { return softmax(mask(Q * trans(K), lengths(lens))) * V; }, q, k, v, 2);
  }
  SECTION("lengths excluding (masked_rows::zero)") {
    check_all([&] { return softmax(mask(Q * trans(K), lengths(lens, masked_rows::zero))) * V; }, q, k, v, 3);
  }
  SECTION("softcap then scale then window") {
    check_all([&] { return softmax(mask(softcap(Q * trans(K), 1.5) * 2.0, window(2, 1))) * V; }, q, k, v, 4);
  }
  SECTION("dropout") {
    check_all([&] { return dropout(softmax(Q * trans(K)), 0.3f, 11) * V; }, q, k, v, 5);
  }
  SECTION("a user policy through its generic operator()") {
    check_all([&] { return softmax(mask(score(user_cosine{}, Q, K), causal())) * V; }, q, k, v, 6);
  }
}

TEST_CASE("reference backward: bias gradients are summed over the broadcast axes") {
  testing::rng rng(8);
  auto q = rng.tensor<double>({2, 2, 4, 3}), k = rng.tensor<double>({2, 2, 5, 3}), v = rng.tensor<double>({2, 2, 5, 2});
  xt::xarray<double> b1 = rng.tensor<double>({4, 5}), b2 = rng.tensor<double>({2, 1, 1, 5});
  const auto Q = ref(q), K = ref(k), V = ref(v);
  auto make = [&] { return softmax(softcap(Q * trans(K) + bias(b1), 2.0) + bias(b2)) * V; };
  testing::rng r2(9);
  xt::xtensor<double, 4> d_out = r2.tensor<double>({2, 2, 4, 2});
  const auto g = reference_grad(make_plan(make()), d_out);
  REQUIRE(g.dbias.size() == 2);
  REQUIRE(g.dbias[0].shape() == b1.shape());
  REQUIRE(g.dbias[1].shape() == b2.shape());
  check_fd(make, b1, g.dbias[0], d_out, "dbias (4, 5)");
  check_fd(make, b2, g.dbias[1], d_out, "dbias (2, 1, 1, 5)");
  check_fd(make, q, g.dq, d_out, "dq");
}

TEST_CASE("reference backward: tensor scores (d2l's masked_softmax) and weights expressions") {
  testing::rng rng(10);
  auto x = rng.tensor<double>({2, 3, 4, 5});
  xt::xtensor<int, 2> lens2{{2, 0, 5, 1}, {1, 3, 4, 0}};  // (batch, queries), zeros included
  xt::xtensor<int, 1> lens1{3, 0};
  const auto X = ref(x);
  xt::xtensor<double, 4> d_out = rng.tensor<double>({2, 3, 4, 5});
  auto make1 = [&] { return softmax(mask(X, lengths(lens1))); };
  check_fd(make1, x, reference_grad(make_plan(make1()), d_out).dx, d_out, "dx, 1-D lengths");
  auto make2 = [&] { return softmax(mask(X / 0.7, lengths(lens2))); };
  check_fd(make2, x, reference_grad(make_plan(make2()), d_out).dx, d_out, "dx, 2-D lengths");
}
