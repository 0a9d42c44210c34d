#pragma once
// Differential testing (the fuzzer, tests/fuzz): random shapes (odd sizes, S = 1, D = 1, Sq != Skv,
// D != Dv, GQA, rank-3, rank-4 and packed layouts), random schedules and 1 or 2 threads; the fused
// result must match the double-precision reference evaluated from the same expression.
//
// Tolerance. A score is an n-term sum; its rounding error is at most n·ε·Σ|terms| (Higham, ch. 3),
// which we bound by n·ε·(1 + max|s|) with n = max(D, h, 16). Softmax turns a score error δ into a
// relative weight error of at most 2δ, and the output is a convex combination of V rows, so
//     |out - ref| <= 8 · n · ε · (1 + max|s|) · max|V|      (8: exp, rescaling and P·V roundings)
// with ε = 2^-24 (float, and 16-bit operands: exact in float, accumulated in float) or 2^-53 (double).
#include <cstddef>

namespace xattn::testing {

struct case_sizes {
  std::size_t B, Hkv, G, Sq, Skv, Dq, Dk, Dv;
  bool three_d;  // rank-3 (B, S, D) operands (one head)
  std::size_t Hq() const { return Hkv * G; }
};

}  // namespace xattn::testing
