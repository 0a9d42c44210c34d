#pragma once
// Differential testing: random shapes (odd sizes, S = 1, D = 1, Sq != Skv, D != Dv, GQA, rank-3,
// rank-4 and packed layouts), random schedules and 1 or 2 threads; the fused result must match
// the double-precision reference evaluated from the same expression.
//
// Tolerance. A score is an n-term sum; its rounding error is at most n·ε·Σ|terms| (Higham, ch. 3),
// which we bound by n·ε·(1 + max|s|) with n = max(D, h, 16). Softmax turns a score error δ into a
// relative weight error of at most 2δ, and the output is a convex combination of V rows, so
//     |out - ref| <= 8 · n · ε · (1 + max|s|) · max|V|      (8: exp, rescaling and P·V roundings)
// with ε = 2^-24 (float, and 16-bit operands: exact in float, accumulated in float) or 2^-53 (double).
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <sstream>

namespace xattn::testing {

struct case_sizes {
  std::size_t B, Hkv, G, Sq, Skv, Dq, Dk, Dv;
  bool three_d;  // rank-3 (B, S, D) operands (one head)
  std::size_t Hq() const { return Hkv * G; }
};

inline case_sizes random_sizes(rng& r, bool same_qk_dim) {
  case_sizes s{};
  s.three_d = r.coin(0.3);
  s.B = r.size(1, 3);
  s.Hkv = s.three_d ? 1 : r.size(1, 2);
  s.G = s.three_d ? 1 : r.size(1, 2);
  s.Sq = r.coin(0.15) ? 1 : r.size(1, 70);
  s.Skv = r.coin(0.1) ? 1 : r.size(1, 150);
  s.Dq = r.coin(0.1) ? 1 : r.coin(0.05) ? r.size(100, 512) : r.size(1, 80);
  s.Dk = same_qk_dim ? s.Dq : r.size(1, 40);
  s.Dv = r.coin(0.1) ? 1 : r.size(1, 70);
  return s;
}

inline std::string describe(const case_sizes& s, std::uint64_t seed, const schedule& sch) {
  std::ostringstream os;
  os << "seed " << seed << ": B=" << s.B << " Hq=" << s.Hq() << " Hkv=" << s.Hkv << " Sq=" << s.Sq << " Skv=" << s.Skv
     << " Dq=" << s.Dq << " Dk=" << s.Dk << " Dv=" << s.Dv << (s.three_d ? " rank-3" : " rank-4")
     << " block_q=" << sch.block_q << " block_k=" << sch.block_k << " threads=" << sch.threads;
  return os.str();
}

template <class T>
struct operands {
  xt::xarray<T> q, k, v;
};

template <class T>
operands<T> make_operands(rng& r, const case_sizes& s, bool packed) {
  if (packed)
    return {r.tensor<T>({s.B, s.Sq, s.Hq() * s.Dq}), r.tensor<T>({s.B, s.Skv, s.Hkv * s.Dk}),
            r.tensor<T>({s.B, s.Skv, s.Hkv * s.Dv})};
  if (s.three_d)
    return {r.tensor<T>({s.B, s.Sq, s.Dq}), r.tensor<T>({s.B, s.Skv, s.Dk}), r.tensor<T>({s.B, s.Skv, s.Dv})};
  return {r.tensor<T>({s.B, s.Hq(), s.Sq, s.Dq}), r.tensor<T>({s.B, s.Hkv, s.Skv, s.Dk}),
          r.tensor<T>({s.B, s.Hkv, s.Skv, s.Dv})};
}

/// Fused output element (b, h, i, d) whatever the layout.
template <class Out>
double fused_at(const Out& out, const case_sizes& s, bool packed, std::size_t b, std::size_t h, std::size_t i,
                std::size_t d) {
  if (packed) return double(out(b, i, h * s.Dv + d));
  if (s.three_d) return double(out(b, i, d));
  return double(out(b, h, i, d));
}

/// Run `cases` random cases of one (scorer, mask family) pair.
/// make_scores(Q, K, sizes, rng) -> score expression; add_masks(scores, sizes, rng) -> masked expression.
template <class T, class MakeScores, class AddMasks>
void differential(const char* name, std::uint64_t seed, int cases, bool same_qk_dim, bool packed,
                  MakeScores make_scores, AddMasks add_masks) {
  for (int c = 0; c < cases; ++c) {
    const std::uint64_t cs = seed * 1000 + std::uint64_t(c);
    rng r(cs);
    case_sizes s = random_sizes(r, same_qk_dim);
    if (packed) s.three_d = false;
    const schedule sch{r.size(1, 80), r.size(1, 200), int(r.size(1, 2))};
    const auto ops = make_operands<T>(r, s, packed);
    auto build = [&](auto Q, auto K, auto V) { return softmax(add_masks(make_scores(Q, K, s, r), s, r)) * V; };
    auto run = [&](const auto& e) {
      INFO(name << " " << describe(s, cs, sch));
      const auto want = reference(e);
      const auto got = eval(e, sch);
      double max_s = 0, max_v = 0, err = 0;
      for (double x : want.scores)
        if (std::isfinite(x)) max_s = std::max(max_s, std::abs(x));
      for (auto x : ops.v) max_v = std::max(max_v, std::abs(double(x)));
      const double n = double(std::max<std::size_t>({s.Dq, s.Dk, 16}));
      const double eps = std::is_same_v<accumulator_t<T>, float> ? 0x1p-24 : 0x1p-53;
      const double tol = 8 * n * eps * (1 + max_s) * std::max(1.0, max_v);
      for (std::size_t b = 0; b < s.B; ++b)
        for (std::size_t h = 0; h < s.Hq(); ++h)
          for (std::size_t i = 0; i < s.Sq; ++i)
            for (std::size_t d = 0; d < s.Dv; ++d)
              err = std::max(err, std::abs(fused_at(got, s, packed, b, h, i, d) - want.output(b, h, i, d)));
      INFO("max error " << err << ", tolerance " << tol);
      REQUIRE(err <= tol);
    };
    if (packed)
      run(build(heads(ops.q, s.Hq()), heads(ops.k, s.Hkv), heads(ops.v, s.Hkv)));
    else
      run(build(ref(ops.q), ref(ops.k), ref(ops.v)));
  }
}

}  // namespace xattn::testing
