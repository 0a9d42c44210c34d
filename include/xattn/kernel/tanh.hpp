#pragma once
// tanh on the additive score's hot path (w_v · tanh(W_q q + W_k k): one per pair and feature, in
// the forward and again in the backward's recomputed scores). Float, without branches: for
// |x| >= 0.1, (1 - e) / (1 + e) with e = e^(-2|x|) from the softmax's exp2_nonpositive, whose
// relative error δ <= 2.4e-7 becomes at most δ/2 absolute; below 0.1 the odd Taylor series to x^9
// (truncation under 1e-12 relative). Error against std::tanh (checked by tests/kernel/test_exp.cpp):
// at most 1.4e-7 absolute and 8.3e-7 relative. Written here rather than taken from xsimd::tanh for
// throughput: one exp2_nonpositive, one division and a short polynomial per lane. Odd exactly,
// ±inf -> ±1, NaN stays NaN. double uses xsimd::tanh on arguments clamped to [-40, 40].
#include "exp.hpp"

#include <type_traits>

namespace xattn::kernel {

template <class T>
inline simd::batch<T> tanh(const simd::batch<T>& x) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    using fb = simd::batch<float>;
    const fb a = xsimd::abs(x);
    const fb e = exp2_nonpositive<float>(a * fb(float(-2 * log2e)));
    const fb large = (fb(1.0f) - e) / (fb(1.0f) + e);
    const fb a2 = a * a;
    fb p = xsimd::fma(a2, fb(float(62.0 / 2835)), fb(float(-17.0 / 315)));
    p = xsimd::fma(p, a2, fb(float(2.0 / 15)));
    p = xsimd::fma(p, a2, fb(float(-1.0 / 3)));
    const fb small = xsimd::fma(p * a2, a, a);
    return xsimd::bitwise_xor(xsimd::select(a < fb(0.1f), small, large), xsimd::bitofsign(x));
  } else {
    // xsimd's tanh converts large arguments to integers, undefined behaviour for ±inf; every
    // |x| >= 40 gives ±1 anyway, and NaN is put back after
    using db = simd::batch<double>;
    return xsimd::select(xsimd::isnan(x), x, xsimd::tanh(xsimd::min(xsimd::max(x, db(-40.0)), db(40.0))));
  }
}

}  // namespace xattn::kernel
