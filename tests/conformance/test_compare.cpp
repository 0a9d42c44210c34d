#include <conformance/compare.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

using namespace xattn::onnx;
using namespace xattn::conformance;
using Catch::Matchers::Contains;

namespace {

const tolerance onnx_tol{1e-3, 1e-7};

compare_result cmp(std::vector<double> actual, std::vector<double> expected, std::vector<std::int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(expected.size())};
  return compare(actual, shape, expected, shape, onnx_tol);
}

}  // namespace

TEST_CASE("|a - e| <= atol + rtol * |e| decides each element", "[compare]") {
  CHECK(cmp({1.0}, {1.0}).ok);
  CHECK(cmp({1.0 + 1e-3}, {1.0}).ok);  // allowance is 1.0000001e-3
  CHECK_FALSE(cmp({1.0 + 1.01e-3}, {1.0}).ok);
  CHECK(cmp({-1.0 - 1e-3}, {-1.0}).ok);  // |e|, not e
  CHECK(cmp({1e-7}, {0.0}).ok);          // at zero only atol remains
  CHECK_FALSE(cmp({2e-7}, {0.0}).ok);
  CHECK(cmp({}, {}).ok);

  const auto r = cmp({1.0, 2.0, 3.0, 4.0, 5.5, 6.0}, {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  CHECK_FALSE(r.ok);
  CHECK(r.shape_ok);
  CHECK(r.mismatches == 1);
  CHECK(r.max_abs_err == 0.5);
  CHECK(r.worst_flat_index == 4);
  CHECK(r.worst_index == "[1,1]");
  CHECK(r.expected == 5.0);
  CHECK(r.actual == 5.5);
  CHECK_THAT(r.message, Contains("1 of 6 elements differ; worst at [1,1]: expected 5, got 5.5"));
}

TEST_CASE("the worst element is the failing one with the largest error", "[compare]") {
  // 0.5 off at 1000 is allowed; 1e-6 off at 0 and 2e-6 off at 1e-3 are not.
  const auto r = cmp({1000.5, 1e-6, 1e-3 + 2e-6}, {1000.0, 0.0, 1e-3});
  CHECK_FALSE(r.ok);
  CHECK(r.mismatches == 2);
  CHECK(r.max_abs_err == 0.5);
  CHECK(r.worst_flat_index == 2);
  CHECK(r.worst_index == "[2]");
  CHECK(r.worst_abs_err == Approx(2e-6));

  const auto ok = cmp({1000.5, 0.0}, {1000.0, 0.0});
  CHECK(ok.ok);
  CHECK(ok.worst_flat_index == 0);  // nothing fails: the largest error overall
}

TEST_CASE("NaN matches only NaN", "[compare]") {
  CHECK(cmp({NAN}, {NAN}).ok);
  CHECK(cmp({NAN, 1.0}, {NAN, 1.0}).max_abs_err == 0);
  CHECK_FALSE(cmp({0.0}, {NAN}).ok);
  const auto r = cmp({1.0, NAN}, {1.0, 2.0});
  CHECK_FALSE(r.ok);
  CHECK(r.worst_flat_index == 1);
  CHECK(std::isinf(r.max_abs_err));
}

TEST_CASE("an infinity matches only the same infinity", "[compare]") {
  CHECK(cmp({-INFINITY, 0.5}, {-INFINITY, 0.5}).ok);
  CHECK(cmp({INFINITY}, {INFINITY}).ok);
  CHECK_FALSE(cmp({INFINITY}, {-INFINITY}).ok);
  CHECK_FALSE(cmp({-1e30}, {-INFINITY}).ok);  // finite is never "close" to -inf
  CHECK_FALSE(cmp({INFINITY}, {1.0}).ok);
  CHECK_FALSE(cmp({NAN}, {-INFINITY}).ok);
}

TEST_CASE("shapes must match exactly, rank included", "[compare]") {
  const std::vector<double> v{1, 2, 3, 4, 5, 6};
  const std::vector<std::int64_t> s23{2, 3}, s32{3, 2}, s6{6};
  auto r = compare(v, s23, v, s32, onnx_tol);
  CHECK_FALSE(r.ok);
  CHECK_FALSE(r.shape_ok);
  CHECK(r.message == "shape mismatch: expected [3,2], got [2,3]");
  CHECK_FALSE(compare(v, s6, v, s23, onnx_tol).ok);
  const std::vector<double> five{1, 2, 3, 4, 5};
  r = compare(five, s23, v, s23, onnx_tol);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Contains("element count mismatch"));
}

TEST_CASE("actual values are stored in the expected dtype before comparing", "[compare]") {
  std::vector<double> v{1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), 0.1, 65520.0, -1e-9};
  round_to_dtype(v, dtype::f16);
  CHECK(v[0] == 1.0 + std::ldexp(1.0, -10));  // one rounding, not via float
  CHECK(v[1] == half_to_float(0x2e66));
  CHECK(v[2] == INFINITY);
  CHECK(v[3] == 0.0);
  CHECK(std::signbit(v[3]));

  std::vector<double> f{0.1};
  round_to_dtype(f, dtype::f32);
  CHECK(f[0] == static_cast<double>(0.1f));

  // A float16 expected value compares against the rounded actual value.
  std::vector<double> actual{0.33333333};
  round_to_dtype(actual, dtype::f16);
  CHECK(actual[0] == half_to_float(float_to_half(0.33333333f)));
}
