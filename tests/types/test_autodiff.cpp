// The differentiable scalar types: var (reverse mode, one sweep for every input) against dual
// (forward mode, one evaluation per input) and both against central finite differences of the
// same generic code; var_lanes (reverse mode on several lanes at once) against var lane by lane;
// learnable's conversions and parameter_slots' bookkeeping.
#include <xattn/dual.hpp>
#include <xattn/learnable.hpp>
#include <xattn/param_dual.hpp>
#include <xattn/var.hpp>
#include <xattn/var_lanes.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <span>
#include <vector>

using namespace xattn;

namespace {

/// Generic code touching every operation and math function the two types provide.
template <class T>
T f(std::span<const T> x) {
  using std::abs, std::exp, std::log, std::max, std::min, std::pow, std::sqrt, std::tanh;
  T s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += x[i] * x[(i + 1) % x.size()];
  T r = tanh(s) / sqrt(x[0] * x[0] + T(1)) + exp(-abs(x[1] - x[2])) + log(T(2) + x[3] * x[3]);
  r += pow(abs(x[0]) + T(1), 1.5) + max(x[1], x[3]) * min(x[0], x[2]) - x[2] / (x[3] - T(3));
  r -= T(0.5) * x[1];
  r *= T(1.25);
  r /= x[0] * x[0] + T(2);
  return r;
}

const std::array<double, 4> at{0.3, -0.7, 1.1, 0.4};

}  // namespace

TEST_CASE("var: one sweep gives the derivatives dual numbers give one input at a time") {
  tape<double>& t = tape<double>::local();
  t.clear();
  std::array<var<double>, 4> xv;
  for (std::size_t n = 0; n < 4; ++n) xv[n] = t.input(at[n]);
  const var<double> y = f<var<double>>(xv);
  // the same operations, but GCC may contract a * b + c into one FMA in either and not the other
  // (-ffp-contract=fast, its default; -O2 and -O3 decide differently): equal to a few roundings
  CHECK(std::abs(y.v - f<double>(at)) < 1e-15 * std::abs(f<double>(at)));
  t.sweep(y, 1.0);
  for (std::size_t n = 0; n < 4; ++n) {
    std::array<dual<double>, 4> xd;
    for (std::size_t m = 0; m < 4; ++m) xd[m] = dual<double>(at[m], m == n ? 1.0 : 0.0);
    const double forward = f<dual<double>>(xd).d;
    std::array<double, 4> up = at, down = at;
    const double h = 1e-6;
    up[n] += h;
    down[n] -= h;
    const double central = (f<double>(up) - f<double>(down)) / (2 * h);
    INFO("input " << n);
    CHECK(std::abs(t.adjoint(xv[n]) - forward) < 1e-14);
    CHECK(std::abs(forward - central) < 1e-8);
  }
}

TEST_CASE("var: several outputs are swept at once, constants make no nodes, kinks are finite") {
  tape<double>& t = tape<double>::local();
  t.clear();
  const var<double> c = var<double>(2.0) * 3 + 1;  // constants only: folded, no node
  CHECK(c.id == 0);
  CHECK(c.v == 7);
  const var<double> x = t.input(0.5), y = t.input(-2.0);
  const var<double> a = x * y + c, b = exp(x) - y / c;
  const std::array<std::pair<std::uint32_t, double>, 2> seeds{{{a.id, 3.0}, {b.id, -1.0}}};
  t.sweep(std::span<const std::pair<std::uint32_t, double>>(seeds));
  // d(3a - b)/dx = 3y - e^x, d/dy = 3x + 1/c
  CHECK(std::abs(t.adjoint(x) - (3 * -2.0 - std::exp(0.5))) < 1e-15);
  CHECK(std::abs(t.adjoint(y) - (3 * 0.5 + 1 / 7.0)) < 1e-15);
  CHECK(t.adjoint(c) == 0);
  // sqrt at 0 has derivative 0, as dual's: a zero vector's norm sends no NaN back
  t.clear();
  const var<double> z = t.input(0.0);
  t.sweep(sqrt(z * z), 1.0);
  CHECK(t.adjoint(z) == 0);
  CHECK(sqrt(dual<double>(0.0, 1.0)).d == 0);
  t.clear();
  const var<double> n = t.input(-1.5);
  t.sweep(abs(n), 2.0);
  CHECK(t.adjoint(n) == -2.0);
}

TEMPLATE_TEST_CASE("var_lanes: each lane's value and adjoints are var's on that lane's inputs", "", float, double) {
  using T = TestType;
  using L = var_lanes<T>;
  constexpr std::size_t lanes = lane_count<T>;
  lane_tape<T>& t = lane_tape<T>::local();
  t.clear();
  // lane l evaluates f at `at` moved by l / 50; lane 1's seed is 0
  std::array<std::array<T, lanes>, 4> in;
  std::array<T, lanes> seed;
  for (std::size_t l = 0; l < lanes; ++l) {
    for (std::size_t n = 0; n < 4; ++n) in[n][l] = T(at[n] + double(l) / 50);
    seed[l] = l == 1 ? T(0) : T(1) + T(l);
  }
  std::array<L, 4> xl;
  for (std::size_t n = 0; n < 4; ++n) xl[n] = t.input(L::batch_type::load(in[n].data()));
  const L y = f<L>(xl);
  t.sweep(y, L::batch_type::load(seed.data()));
  std::array<T, lanes> value, adj;
  y.v.store(value.data());
  // xsimd's exp, log, tanh and pow round differently from std's in the last bits
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-14;
  for (std::size_t l = 0; l < lanes; ++l) {
    tape<T>& s = tape<T>::local();
    s.clear();
    std::array<var<T>, 4> xv;
    for (std::size_t n = 0; n < 4; ++n) xv[n] = s.input(in[n][l]);
    const var<T> ys = f<var<T>>(xv);
    s.sweep(ys, seed[l]);
    INFO("lane " << l);
    CHECK(std::abs(value[l] - ys.v) <= tol * std::abs(ys.v));
    for (std::size_t n = 0; n < 4; ++n) {
      t.adjoint(xl[n].id).store(adj.data());
      CHECK(std::abs(adj[l] - s.adjoint(xv[n])) <= tol * (1 + std::abs(s.adjoint(xv[n]))));
      if (l == 1) CHECK(adj[l] == 0);  // seed 0: nothing flows back
    }
  }
}

TEST_CASE("var_lanes: comparisons must agree across lanes; kinks and unseeded lanes send nothing back") {
  using L = var_lanes<double>;
  using B = L::batch_type;
  constexpr std::size_t lanes = lane_count<double>;
  lane_tape<double>& t = lane_tape<double>::local();
  t.clear();
  std::array<double, lanes> a{}, one{};
  for (std::size_t l = 0; l < lanes; ++l) a[l] = double(l), one[l] = 1;
  const L x = t.input(B::load(a.data()));
  CHECK(x >= L(0.0));                             // true in every lane
  CHECK_FALSE(x < L(0.0));                        // false in every lane
  CHECK_THROWS_AS(x == L(0.0), divergent_lanes);  // lane 0 only
  CHECK_THROWS_AS(x > L(0.5), divergent_lanes);
  CHECK((x <=> L(-1.0)) == std::partial_ordering::greater);  // var's three-way comparison too
  CHECK_THROWS_AS(x <=> L(0.5), divergent_lanes);
  // sqrt at 0 (lane 0) has derivative 0, as var's
  std::array<double, lanes> adj{};
  t.sweep(sqrt(x), B::load(one.data()));
  t.adjoint(x.id).store(adj.data());
  CHECK(adj[0] == 0);
  for (std::size_t l = 1; l < lanes; ++l) CHECK(adj[l] == Approx(0.5 / std::sqrt(double(l))));
  // ∂(1 / x)/∂x is -inf in lane 0, whose seed is 0: nothing flows back there, not NaN
  std::array<double, lanes> seed = one;
  seed[0] = 0;
  t.sweep(L(1.0) / x, B::load(seed.data()));
  t.adjoint(x.id).store(adj.data());
  CHECK(adj[0] == 0);
  for (std::size_t l = 1; l < lanes; ++l) CHECK(adj[l] == Approx(-1.0 / (double(l) * double(l))));
  // constants make no nodes; a learnable is an input of the lanes' tape
  CHECK((L(2.0) * L(3.0)).id == 0);
  t.clear();
  const learnable<> w = 0.5;
  const L z = t.input(B::load(a.data())) * L(w) * L(w);
  REQUIRE(t.learned().size() == 2);
  CHECK(t.learned()[1].address == &w);
  t.sweep(z, B::load(one.data()));
  double dw = 0;
  for (const auto& leaf : t.learned()) dw += hsum(t.adjoint(leaf.id));
  double want = 0;
  for (std::size_t l = 0; l < lanes; ++l) want += 2 * a[l] * 0.5;  // d(x w²)/dw = 2 x w, summed over lanes
  CHECK(dw == Approx(want));
}

TEST_CASE("learnable: a value for float and double, an input for var, the seed for dual") {
  const learnable<> w = 0.25;
  CHECK(float(w) == 0.25f);
  CHECK(double(w) == 0.25);
  CHECK(dual<double>(w).d == 0);
  {
    const seed_learnable seed(&w);
    CHECK(dual<double>(w).v == 0.25);
    CHECK(dual<float>(w).d == 1.0f);
  }
  CHECK(dual<double>(w).d == 0);  // the seed ends with its scope
  tape<float>& t = tape<float>::local();
  t.clear();
  const var<float> x = t.input(2.0f);
  const var<float> y = x * var<float>(w) * var<float>(w);  // w twice: two leaves, both listed
  REQUIRE(t.learned().size() == 2);
  CHECK(t.learned()[0].address == &w);
  t.sweep(y, 1.0f);
  float dw = 0;
  for (const auto& leaf : t.learned()) dw += t.adjoint(leaf.id);
  CHECK(dw == 2.0f * 2.0f * 0.25f);  // d(x w²)/dw = 2 x w
}

namespace {
struct with_parameters {
  learnable<> a = 1;
  std::vector<learnable<>> b{2.0, 3.0, 4.0};
  std::array<learnable<float>, 2> c{5.0f, 6.0f};
  double not_learned = 7;
  auto parameters() const { return std::tie(a, b, c); }
};
struct lists_doubles {
  double a = 1;
  auto parameters() const { return std::tie(a); }
};
}  // namespace

TEST_CASE("parameter_slots: parameters() order, ranges flattened, any other address unknown") {
  STATIC_REQUIRE(declares_learnables<with_parameters>);
  STATIC_REQUIRE(!declares_learnables<lists_doubles>);
  // an entry is a learnable or a contiguous range of them, const or not
  STATIC_REQUIRE(learnable_entry<const std::vector<learnable<>>&>);
  STATIC_REQUIRE(learnable_entry<std::span<learnable<float>>>);
  STATIC_REQUIRE(learnable_entry<learnable<float>(&)[3]>);
  STATIC_REQUIRE(!learnable_entry<std::vector<double>&>);
  STATIC_REQUIRE(!learnable_entry<int>);
  const with_parameters p;
  const parameter_slots s(p);
  REQUIRE(s.size() == 6);
  CHECK(s.find(&p.a) == 0);
  CHECK(s.find(&p.b[0]) == 1);
  CHECK(s.find(&p.b[2]) == 3);
  CHECK(s.find(&p.c[1]) == 5);
  CHECK(s.find(&p.not_learned) == parameter_slots::npos);
  for (std::size_t n = 0; n < s.size(); ++n) CHECK(s.find(s.address(n)) == n);
  const learned_gradients g = s.zeros();
  CHECK(g.size() == 6);
  CHECK_THROWS(g[6]);
}

TEST_CASE("param_dual: the derivative along s and those at the learnables it met are var's") {
  // g(s; a, b, c) with learnables a, b, c read in every operation the type has
  const learnable<> a = 0.7, b = -1.3, c = 0.4;
  const auto g = [&](auto s) {
    using std::abs, std::exp, std::log, std::max, std::min, std::pow, std::sqrt, std::tanh;
    using T = decltype(s);
    T r = s * T(a) + tanh(s - T(b)) / sqrt(s * s + T(1)) + exp(-abs(s)) * log(T(2) + T(c) * T(c));
    return r + pow(abs(T(a)) + T(1), 1.5) + max(s, T(b)) * min(s, T(c)) - s / (T(c) - T(3));
  };
  for (const double s0 : {-1.1, 0.3, 2.5}) {
    const param_dual<double> y = g(param_dual<double>{s0, 1.0});
    tape<double>& t = tape<double>::local();
    t.clear();
    const var<double> x = t.input(s0);
    const var<double> out = g(x);
    t.sweep(out, 1.0);
    CHECK(y.v == Approx(out.v).epsilon(1e-15));
    CHECK(y.d == Approx(t.adjoint(x)).epsilon(1e-13));
    REQUIRE_FALSE(y.overflowed());
    CHECK(y.n == 3);
    for (const learnable<>* l : {&a, &b, &c}) {
      double want = 0, got = 0;
      for (const auto& leaf : t.learned())
        if (leaf.address == l) want += t.adjoint(leaf.id);
      for (std::size_t e = 0; e < y.n; ++e)
        if (y.at[e] == l) got += y.p[e];
      CHECK(got == Approx(want).epsilon(1e-13));
    }
  }
  // more learnables than it holds: it says so
  const std::array<learnable<>, 5> w{1, 2, 3, 4, 5};
  param_dual<double> sum(0.0);
  for (const auto& x : w) sum += param_dual<double>(x);
  CHECK(sum.v == 15);
  CHECK(sum.overflowed());
}
