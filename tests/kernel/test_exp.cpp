// The kernel's exp for non-positive arguments: accuracy against std::exp (double) and xsimd::exp.
#include <xattn/kernel/exp.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace xattn;

TEST_CASE("exp_nonpositive<float>: relative error below 3e-7 on [-87, 0], exact 0 below and for -inf") {
  constexpr std::size_t w = simd::width<float>;
  double worst = 0, worst_xsimd = 0;
  std::vector<float> x(w), y(w), z(w);
  for (std::size_t n = 0; n <= 870000; n += w) {
    for (std::size_t l = 0; l < w; ++l) x[l] = -float(n + l) * 1e-4f;
    simd::store(y.data(), kernel::exp_nonpositive(simd::load(x.data())));
    simd::store(z.data(), xsimd::exp(simd::load(x.data())));
    for (std::size_t l = 0; l < w; ++l) {
      const double e = std::exp(double(x[l]));
      worst = std::max(worst, std::abs(y[l] - e) / e);
      worst_xsimd = std::max(worst_xsimd, std::abs(z[l] - e) / e);
    }
  }
  INFO("exp_nonpositive " << worst << ", xsimd::exp " << worst_xsimd);
  REQUIRE(worst < 3e-7);
  for (float v : {-88.0f, -100.0f, -1e30f, -std::numeric_limits<float>::infinity()}) {
    std::fill(x.begin(), x.end(), v);
    simd::store(y.data(), kernel::exp_nonpositive(simd::load(x.data())));
    REQUIRE(y[0] == 0.0f);
  }
  std::fill(x.begin(), x.end(), 0.0f);
  simd::store(y.data(), kernel::exp_nonpositive(simd::load(x.data())));
  REQUIRE(y[0] == 1.0f);
}

TEST_CASE("exp_nonpositive<float>: NaN stays NaN, lane by lane; the flush to 0 is at 2^-126") {
  constexpr std::size_t w = simd::width<float>;
  std::vector<float> x(w), y(w);
  for (std::size_t l = 0; l < w; ++l) x[l] = l % 3 == 0 ? std::numeric_limits<float>::quiet_NaN() : -float(l);
  x[1] = -87.3f;  // e^-87.3 = 1.2e-38, just above the smallest normal float
  x[2] = -87.4f;  // just below it: flushed
  simd::store(y.data(), kernel::exp_nonpositive(simd::load(x.data())));
  for (std::size_t l = 0; l < w; ++l) {
    INFO("lane " << l << ", x = " << x[l] << ", exp = " << y[l]);
    if (l % 3 == 0) REQUIRE(std::isnan(y[l]));
    else if (l == 2) REQUIRE(y[l] == 0.0f);
    else REQUIRE(y[l] == Approx(std::exp(double(x[l]))).epsilon(3e-7));
  }
}
