#pragma once
// The fused backward against the double reference's gradients, for every pipeline grad_checked()
// names (pipelines.hpp): d_out uniform in [-1, 1] in the output's layout, then dq, dk,
// dv (or dx), every bias gradient element by element, and a user policy's learnables.
//
// Tolerance: a gradient element is a sum over at most max(Sq, Skv) products of P (<= 1), dP or
// dS (|dP| <= Dv·|dO|·|V| <= Dv) and an operand (|Q|, |K| <= amplitude), each with the forward's
// score error 8·n·eps·(1 + max|s|) carried through e^(S − lse). So
// tol = 8·n·eps·(1 + max|s|)·(1 + max|reference gradient|)·Dv, per tensor.
#include "check.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <xtensor/xarray.hpp>

namespace xattn::fuzz {

/// Element (b, h, s, d) of a gradient returned in the form of its operand.
template <class G>
double grad_at(const G& g, bool packed, std::size_t heads, std::size_t b, std::size_t h, std::size_t s, std::size_t d) {
  if (g.dimension() == 4) return double(g(b, h, s, d));
  if (!packed) return double(g(b, s, d));
  return double(g(b, s, h * (g.shape()[2] / heads) + d));
}

template <class G>
verdict compare_grad(const char* what, const G& got, const xt::xtensor<double, 4>& want, bool packed,
                     double score_tol) {
  double biggest = 0;
  for (double x : want) biggest = std::max(biggest, std::abs(x));
  const double tol = score_tol * (1 + biggest);
  const auto& s = want.shape();
  for (std::size_t b = 0; b < s[0]; ++b)
    for (std::size_t h = 0; h < s[1]; ++h)
      for (std::size_t i = 0; i < s[2]; ++i)
        for (std::size_t d = 0; d < s[3]; ++d) {
          const double g = grad_at(got, packed, s[1], b, h, i, d), w = want(b, h, i, d);
          if (std::abs(g - w) <= tol) continue;
          std::ostringstream os;
          os << what << "(b=" << b << ", h=" << h << ", " << i << ", " << d << ") = " << g << ", reference " << w
             << ", tolerance " << tol;
          return {false, os.str()};
        }
  return {};
}

template <class T, class E>
verdict check_grad(const E& e, out_layout l, const reference_result& fwd, const testing::case_sizes& z,
                   const schedule& sch, testing::rng& r) {
  const auto shape = expected_shape(l, z);
  xt::xarray<T> d_out = r.tensor<T>(shape);
  xt::xtensor<double, 4> d4 = xt::xtensor<double, 4>::from_shape({z.B, z.Hq(), z.Sq, z.Dv});
  for (std::size_t b = 0; b < z.B; ++b)
    for (std::size_t h = 0; h < z.Hq(); ++h)
      for (std::size_t i = 0; i < z.Sq; ++i)
        for (std::size_t d = 0; d < z.Dv; ++d) d4(b, h, i, d) = fused_at(d_out, l, z, b, h, i, d);
  const auto f = eval_with_lse(e, sch);
  const auto g = grad(e, f, d_out, sch);
  const auto want = reference_grad(make_plan(e), d4);
  double max_s = 0;
  const double fill = lengths_mask{}.fill_value;
  for (double s : fwd.scores)
    if (std::isfinite(s) && s != fill) max_s = std::max(max_s, std::abs(s));
  const double eps = std::is_same_v<T, float> ? 0x1p-24 : 0x1p-53;
  const double n = double(std::max<std::size_t>({z.Dq, z.Dk, 40}));
  const double score_tol = 8 * n * eps * (1 + max_s) * double(std::max<std::size_t>(z.Dv, 1));
  const bool packed = l == out_layout::packed;
  verdict v = compare_grad("dv", g.dv, want.dv, packed, score_tol);
  if (v.ok && want.dx.size()) v = compare_grad("dx", g.dx, want.dx, false, score_tol);
  if (v.ok && want.dq.size()) v = compare_grad("dq", g.dq, want.dq, packed, score_tol);
  if (v.ok && want.dk.size()) v = compare_grad("dk", g.dk, want.dk, packed, score_tol);
  if (v.ok && want.dq2.size()) v = compare_grad("dq2", g.dq2, want.dq2, false, score_tol);
  if (v.ok && want.dk2.size()) v = compare_grad("dk2", g.dk2, want.dk2, false, score_tol);
  for (std::size_t n_b = 0; v.ok && n_b < want.dbias.size(); ++n_b) {
    double biggest = 0, worst = 0;
    for (double x : want.dbias[n_b]) biggest = std::max(biggest, std::abs(x));
    for (std::size_t k = 0; k < want.dbias[n_b].size(); ++k)
      worst = std::max(worst, std::abs(double(g.dbias[n_b].flat(k)) - want.dbias[n_b].flat(k)));
    if (!(worst <= score_tol * (1 + biggest)))
      v = {false, "dbias[" + std::to_string(n_b) + "]: error " + std::to_string(worst)};
  }
  if (v.ok && want.dsinks.size()) {  // a sum over each head's rows of p_sink · Δ
    const double rows = double(z.B * z.Sq);
    for (std::size_t h = 0; v.ok && h < want.dsinks.size(); ++h)
      if (!(std::abs(double(g.dsinks(h)) - want.dsinks[h]) <= score_tol * rows * (1 + std::abs(want.dsinks[h]))))
        v = {false, "dsinks[" + std::to_string(h) + "] = " + std::to_string(double(g.dsinks(h))) + ", reference " +
                        std::to_string(want.dsinks[h])};
  }
  if constexpr (std::is_same_v<std::decay_t<decltype(g.dscore)>, learned_gradients>) {
    // a sum over every visible pair of dS_ij · ∂s_ij/∂w: the per-pair tolerance times the pairs
    const double pairs = double(z.B * z.Hq() * z.Sq * z.Skv);
    for (std::size_t n = 0; v.ok && n < want.dscore.size(); ++n)
      if (!(std::abs(g.dscore[n] - want.dscore[n]) <= score_tol * pairs * (1 + std::abs(want.dscore[n]))))
        v = {false, "dscore[" + std::to_string(n) + "] = " + std::to_string(g.dscore[n]) + ", reference " +
                        std::to_string(want.dscore[n])};
  }
  if (!v.ok) v.detail = "backward: " + v.detail;
  return v;
}

}  // namespace xattn::fuzz
