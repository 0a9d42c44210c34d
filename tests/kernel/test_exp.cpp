// The kernel's base-2 exponential for non-positive arguments and its tanh: accuracy against std::exp2
// and std::tanh (in double).
#include <xattn/kernel/exp.hpp>
#include <xattn/kernel/tanh.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace xattn;

TEMPLATE_TEST_CASE("exp2_nonpositive: relative error on [-125, 0], exact 0 below and for -inf", "[kernel]", float,
                   double) {
  using T = TestType;
  constexpr std::size_t w = simd::width<T>;
  const double bound = std::is_same_v<T, float> ? 3e-7 : 1e-15;
  double worst = 0;
  std::vector<T> x(w), y(w);
  for (std::size_t n = 0; n + w <= 1250000; n += w) {
    for (std::size_t l = 0; l < w; ++l) x[l] = -T(n + l) * T(1e-4);
    simd::store(y.data(), kernel::exp2_nonpositive(simd::load(x.data())));
    for (std::size_t l = 0; l < w; ++l) {
      const double e = std::exp2(double(x[l]));
      worst = std::max(worst, std::abs(y[l] - e) / e);
    }
  }
  INFO("exp2_nonpositive: max relative error " << worst);
  REQUIRE(worst < bound);
  if constexpr (std::is_same_v<T, float>) {
    for (float v : {-125.01f, -126.5f, -127.0f, -200.0f, -1e30f, -std::numeric_limits<float>::infinity()}) {
      std::fill(x.begin(), x.end(), v);
      simd::store(y.data(), kernel::exp2_nonpositive(simd::load(x.data())));
      REQUIRE(y[0] == 0.0f);
    }
  }
  std::fill(x.begin(), x.end(), T(0));
  simd::store(y.data(), kernel::exp2_nonpositive(simd::load(x.data())));
  REQUIRE(y[0] == T(1));
}

TEMPLATE_TEST_CASE("exp2_nonpositive: NaN stays NaN, lane by lane", "[kernel]", float, double) {
  using T = TestType;
  constexpr std::size_t w = simd::width<T>;
  std::vector<T> x(w), y(w);
  for (std::size_t l = 0; l < w; ++l) x[l] = l % 3 == 0 ? std::numeric_limits<T>::quiet_NaN() : -T(l) * T(7.3);
  simd::store(y.data(), kernel::exp2_nonpositive(simd::load(x.data())));
  for (std::size_t l = 0; l < w; ++l) {
    INFO("lane " << l << ", t = " << x[l] << ", 2^t = " << y[l]);
    if (l % 3 == 0)
      REQUIRE(std::isnan(y[l]));
    else
      REQUIRE(y[l] == Approx(std::exp2(double(x[l]))).epsilon(3e-7));
  }
}

TEMPLATE_TEST_CASE("kernel::tanh: error against std::tanh on [-20, 20], and its special values", "[kernel]", float,
                   double) {
  using T = TestType;
  constexpr std::size_t w = simd::width<T>;
  // float: (1 - e)/(1 + e) turns exp2's 2.4e-7 relative error into at most 1.2e-7 absolute, and
  // up to 9e-7 relative just above the switch to the series at 0.1
  const double abs_bound = std::is_same_v<T, float> ? 2e-7 : 1e-15,
               rel_bound = std::is_same_v<T, float> ? 1.5e-6 : 1e-15;
  double worst_abs = 0, worst_rel = 0;
  std::vector<T> x(w), y(w);
  for (std::size_t n = 0; n + w <= 4000000; n += w) {
    for (std::size_t l = 0; l < w; ++l) x[l] = T(-20) + T(n + l) * T(1e-5);
    simd::store(y.data(), kernel::tanh<T>(simd::load(x.data())));
    for (std::size_t l = 0; l < w; ++l) {
      const double e = std::tanh(double(x[l])), d = std::abs(double(y[l]) - e);
      worst_abs = std::max(worst_abs, d);
      if (e != 0) worst_rel = std::max(worst_rel, d / std::abs(e));
    }
  }
  INFO("kernel::tanh: max absolute error " << worst_abs << ", relative " << worst_rel);
  REQUIRE(worst_abs < abs_bound);
  REQUIRE(worst_rel < rel_bound);
  const T inf = std::numeric_limits<T>::infinity();
  for (T v : {T(0), T(-0.0), T(1e-30), T(-3e-8), T(88), T(-100), inf, -inf}) {
    std::fill(x.begin(), x.end(), v);
    simd::store(y.data(), kernel::tanh<T>(simd::load(x.data())));
    INFO("tanh(" << v << ") = " << y[0]);
    REQUIRE(y[0] == T(std::tanh(double(v))));
    REQUIRE(std::signbit(y[0]) == std::signbit(v));
  }
  std::fill(x.begin(), x.end(), std::numeric_limits<T>::quiet_NaN());
  simd::store(y.data(), kernel::tanh<T>(simd::load(x.data())));
  REQUIRE(std::isnan(y[0]));
}
