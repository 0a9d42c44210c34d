#pragma once
// The fused output, lse and gradients of an attention against the double reference, to one tolerance.
#include "support/random.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

namespace xattn::testing {

/// eval_with_lse and grad under sch against reference and reference_grad; lse at 10 tol. Returns
/// the gradients, both ways, for checks of their own.
template <class E, class D>
auto check_against_reference(const E& e, const D& d_out, double tol, const schedule& sch = {}) {
  const auto f = eval_with_lse(e, sch);
  const auto want = reference(e);
  CHECK(max_abs_diff(f.output, want.output) < tol);
  CHECK(max_abs_diff(f.lse, want.lse) < tol * 10);
  auto g = grad(e, f, d_out, sch);
  auto rg = reference_grad(make_plan(e), xt::xtensor<double, 4>(xt::cast<double>(d_out)));
  CHECK(max_abs_diff(g.dq, rg.dq) < tol);
  CHECK(max_abs_diff(g.dk, rg.dk) < tol);
  CHECK(max_abs_diff(g.dv, rg.dv) < tol);
  return std::make_pair(std::move(g), std::move(rg));
}

}  // namespace xattn::testing
