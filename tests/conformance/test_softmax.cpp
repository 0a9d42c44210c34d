#include "case_fixture.hpp"

#include <conformance/case_io.hpp>
#include <conformance/compare.hpp>
#include <xattn/onnx/softmax.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xoperation.hpp>

#include <cmath>
#include <cstdint>
#include <stdexcept>

using namespace xattn::onnx;
using namespace xattn::conformance;
using namespace conformance_test;
using Catch::Matchers::Contains;

namespace {

template <class T>
xt::xarray<T> as_xarray(const tensor_blob& b) {
  xt::xarray<T> a(std::vector<std::size_t>(b.shape.begin(), b.shape.end()));
  std::copy(b.values.begin(), b.values.end(), a.begin());
  return a;
}

template <class T>
compare_result check_against(const onnx_case& c) {
  const auto axis = static_cast<std::int64_t>(c.attr("axis").value_or(attribute{-1, true}).value);
  const xt::xarray<T> y = softmax(as_xarray<T>(*c.input(0)), axis);
  std::vector<double> actual(y.begin(), y.end());
  const tensor_blob& expected = *c.output(0);
  round_to_dtype(actual, expected.type);
  const std::vector<std::int64_t> shape(y.shape().begin(), y.shape().end());
  return compare(actual, shape, expected, c.tol);
}

}  // namespace

TEST_CASE("all shared Softmax cases pass, computing from double or float input", "[softmax]") {
  int count = 0;
  for (const auto& e : fs::directory_iterator(data_dir())) {
    if (!fs::is_regular_file(e.path() / "case.json")) continue;
    const auto c = load_case(e.path());
    if (c.op_type != "Softmax") continue;
    ++count;
    INFO(c.name);
    const auto d = check_against<double>(c);
    CHECK(d.ok);
    CHECK(d.max_abs_err <= 1e-7);
    CHECK(check_against<float>(c).ok);
  }
  CHECK(count == 7);
}

TEST_CASE("softmax runs along the requested axis, negative counting from the end", "[softmax]") {
  const xt::xarray<double> x = {{0.0, 1.0}, {2.0, 5.0}};
  const auto e = [](double a, double b) { return std::exp(a) / (std::exp(a) + std::exp(b)); };
  const auto rows = softmax(x, 1);
  CHECK(rows(0, 0) == Approx(e(0, 1)));
  CHECK(rows(1, 1) == Approx(e(5, 2)));
  const auto cols = softmax(x, -2);
  CHECK(cols(0, 0) == Approx(e(0, 2)));
  CHECK(cols(1, 1) == Approx(e(5, 1)));
  CHECK(xt::all(xt::equal(softmax(x), rows)));

  const xt::xarray<float> big = {1e4f, 1e4f + 1, 1e4f + 2, 1e4f + 3};
  const auto y = softmax(big);
  CHECK(std::isfinite(y(0)));
  CHECK(y(3) == Approx(0.6439142823));
}

TEST_CASE("softmax rejects an axis outside [-rank, rank-1]", "[softmax]") {
  const xt::xarray<float> x = xt::zeros<float>({3, 4, 5});
  CHECK_NOTHROW(softmax(x, -3));
  CHECK_NOTHROW(softmax(x, 2));
  CHECK_THROWS_AS(softmax(x, 3), std::invalid_argument);
  CHECK_THROWS_WITH(softmax(x, 3), Contains("axis 3") && Contains("(3,4,5)"));
  CHECK_THROWS_WITH(softmax(x, -4), Contains("axis -4") && Contains("valid: -3..2"));
  const xt::xarray<float> scalar = 1.0f;
  CHECK_THROWS_AS(softmax(scalar, 0), std::invalid_argument);
}
