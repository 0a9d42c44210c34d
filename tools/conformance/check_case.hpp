#pragma once
// Runs one case and judges it: every expected output (bound by slot) must pass the
// ONNX comparison. Produces the one-line PASS/FAIL report the CLI prints.

#include "run_case.hpp"

#include "case_io.hpp"
#include "compare.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace xattn::conformance {

struct case_outcome {
  bool passed = false;
  std::string line;  // "PASS name  max_err=..." or "FAIL name  ..."
};

inline std::string format_error(double e) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", e);
  return buf;
}

// The FAIL line's max_err is the error at the reported element: the largest among
// the failing ones. case_error propagates (the case itself is broken); any other exception from the
// implementation is a FAIL of this case.
inline case_outcome check_case(const onnx_case& c) {
  const std::string name = c.name.empty() ? c.dir.filename().string() : c.name;
  const auto fail = [&](const std::string& detail) { return case_outcome{false, "FAIL " + name + "  " + detail}; };

  std::vector<actual_tensor> actual;
  try {
    actual = run_case(c);
  } catch (const case_error&) {
    throw;
  } catch (const std::exception& e) {
    return fail(e.what());
  }

  std::vector<const tensor_blob*> expected;
  for (const auto& e : c.outputs) expected.push_back(&e);
  std::sort(expected.begin(), expected.end(), [](auto* a, auto* b) { return a->slot < b->slot; });

  double max_err = 0;
  for (const tensor_blob* e : expected) {
    const auto it = std::find_if(actual.begin(), actual.end(), [&](const auto& a) { return a.slot == e->slot; });
    if (it == actual.end()) return fail("output=" + e->name + " not produced");
    const compare_result r = compare(it->values, it->shape, *e, c.tol);
    if (!r.ok && !r.shape_ok) return fail("output=" + e->name + " " + r.message);
    if (!r.ok)
      return fail("output=" + e->name + " max_err=" + format_error(r.worst_abs_err) + " at " + r.worst_index +
                  " (expected " + format_value(r.expected) + ", got " + format_value(r.actual) + ")");
    max_err = std::max(max_err, r.max_abs_err);
  }
  return {true, "PASS " + name + "  max_err=" + format_error(max_err)};
}

}  // namespace xattn::conformance
