#pragma once
// The ONNX backend-test comparison (numpy.testing.assert_allclose with equal_nan):
// shapes must match exactly, then every element must satisfy
// |a - e| <= atol + rtol * |e|, where NaN matches NaN and an infinity only itself.

#include <xattn/onnx/half.hpp>
#include "case_io.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace xattn::conformance {

struct compare_result {
  bool ok = false;
  bool shape_ok = false;   // false: shapes (or element counts) differ, nothing else was compared
  double max_abs_err = 0;  // largest |a - e| anywhere; inf if a non-finite value mismatches
  // The worst element: the failing one with the largest |a - e| (if none fails, the
  // largest |a - e| overall), as flat and multi-index (e.g. "[0,2,3,1]"), with its values.
  std::size_t worst_flat_index = 0;
  std::string worst_index;
  double worst_abs_err = 0;
  double expected = 0;
  double actual = 0;
  std::size_t mismatches = 0;
  std::string message;
};

// Enough digits to tell any two floats apart.
inline std::string format_value(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

inline std::string unravel_index(std::size_t flat, std::span<const std::int64_t> shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto n = static_cast<std::size_t>(shape[d]);
    idx[d] = n ? static_cast<std::int64_t>(flat % n) : 0;
    flat = n ? flat / n : 0;
  }
  return format_shape(idx);
}

inline compare_result compare(std::span<const double> actual, std::span<const std::int64_t> actual_shape,
                              std::span<const double> expected, std::span<const std::int64_t> expected_shape,
                              const tolerance& tol) {
  compare_result r;
  if (!std::equal(actual_shape.begin(), actual_shape.end(), expected_shape.begin(), expected_shape.end())) {
    r.message = "shape mismatch: expected " + format_shape(expected_shape) + ", got " + format_shape(actual_shape);
    return r;
  }
  if (actual.size() != expected.size()) {
    r.message = "element count mismatch for shape " + format_shape(expected_shape) + ": expected " +
                std::to_string(expected.size()) + " values, got " + std::to_string(actual.size());
    return r;
  }
  r.shape_ok = true;

  constexpr double inf = std::numeric_limits<double>::infinity();
  bool worst_failed = false;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double a = actual[i], e = expected[i];
    double err;  // |a - e|, or inf when the rule cannot hold
    bool pass;
    if (std::isnan(e) || std::isnan(a)) {
      pass = std::isnan(e) && std::isnan(a);
      err = pass ? 0 : inf;
    } else if (std::isinf(e) || std::isinf(a)) {
      pass = a == e;
      err = pass ? 0 : inf;
    } else {
      err = std::fabs(a - e);
      pass = err <= tol.atol + tol.rtol * std::fabs(e);
    }
    if (!pass) ++r.mismatches;
    r.max_abs_err = std::max(r.max_abs_err, err);
    // A failing element outranks any passing one, so the report points at a real
    // violation even when a large value has a bigger but allowed error.
    const bool outranks = (!pass != worst_failed) ? !pass : err > r.worst_abs_err;
    if (i == 0 || outranks) {
      worst_failed = !pass;
      r.worst_flat_index = i;
      r.worst_abs_err = err;
      r.expected = e;
      r.actual = a;
    }
  }
  r.ok = r.mismatches == 0;
  if (!expected.empty()) r.worst_index = unravel_index(r.worst_flat_index, expected_shape);
  if (r.ok)
    r.message = "max_abs_err=" + format_value(r.max_abs_err);
  else
    r.message = std::to_string(r.mismatches) + " of " + std::to_string(expected.size()) +
                " elements differ; worst at " + r.worst_index + ": expected " + format_value(r.expected) + ", got " +
                format_value(r.actual);
  return r;
}

inline compare_result compare(std::span<const double> actual, std::span<const std::int64_t> actual_shape,
                              const tensor_blob& expected, const tolerance& tol) {
  return compare(actual, actual_shape, expected.values, expected.shape, tol);
}

// What storing the values in a tensor of dtype t would do. Outputs are compared in
// their own dtype (ONNX checks the dtype too), so a float16 result must be rounded to
// half first, exactly once.
inline void round_to_dtype(std::span<double> values, dtype t) {
  for (double& v : values) {
    switch (t) {
      case dtype::f16:
        v = onnx::round_to_half(v);
        break;
      case dtype::f32:
        v = static_cast<double>(static_cast<float>(v));
        break;
      case dtype::f64:
        break;
      case dtype::i32:
      case dtype::i64:
        v = std::nearbyint(v);
        break;
      case dtype::b8:
        v = v != 0 ? 1 : 0;
        break;
    }
  }
}

}  // namespace xattn::conformance
