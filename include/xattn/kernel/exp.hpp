#pragma once
// exp on the kernel's hot path. After the running-max subtraction every argument is <= 0 (or -inf),
// so float uses a short polynomial instead of xsimd::exp: n = round(x·log2 e), g = x - n·ln2 (ln2
// split in two so g keeps full precision, Cody-Waite), e^g by a degree-5 polynomial, then 2^n
// applied by vscalefps on AVX-512 or added to the exponent bits otherwise. Max relative error
// against std::exp over [-87, 0]: 2.7e-7 measured (tests/kernel/test_exp.cpp; xsimd::exp 1.25e-7).
// Results below 2^-126 (x < -87.3) flush to 0, so masked (-inf) scores give exactly 0; NaN stays
// NaN. double keeps xsimd::exp: the tests compare against it.
#include "../simd/compat.hpp"

#include <type_traits>

namespace xattn::kernel {

/// e^g for |g| <= ln2/2: degree 5, 1 + g + g²·q(g) with q interpolating (e^g - 1 - g)/g² at the
/// Chebyshev nodes: relative error 2.0e-7 in exact arithmetic (degree-6 Taylor: 1.2e-7, one more
/// FMA), and e^0 = 1 exactly.
inline simd::batch<float> exp_reduced(const simd::batch<float>& g) noexcept {
  using fb = simd::batch<float>;
  fb p = xsimd::fma(fb(8.36317307e-3f), g, fb(4.18756445e-2f));
  p = xsimd::fma(p, g, fb(1.66665770e-1f));
  p = xsimd::fma(p, g, fb(4.99993721e-1f));
  p = xsimd::fma(p, g, fb(1.0f));
  return xsimd::fma(p, g, fb(1.0f));
}

namespace detail {

/// AVX-512: vscalefps applies 2^n, and its masked-zero form flushes x < -87.3 (results below
/// 2^-126) to 0 in the same instruction; NaN lanes pass the compare (unordered) and stay NaN.
/// A template so that the AVX-512 intrinsics are only instantiated for AVX-512 batches.
template <class B>
inline B exp_scalef(const B& x) noexcept {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, B(-87.33654f), _CMP_NLT_UQ);
  const B xc = xsimd::max(B(-88.0f), x);  // vmaxps returns its second operand on NaN
  const B n = xsimd::nearbyint(xc * B(1.44269504088896341f));
  const B g = xsimd::fnma(n, B(1.428606765330187e-06f), xsimd::fnma(n, B(0.693145751953125f), xc));
  return B(_mm512_maskz_scalef_ps(keep, exp_reduced(g), n));
}

}  // namespace detail

template <class T>
inline simd::batch<T> exp_nonpositive(const simd::batch<T>& x) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    using fb = simd::batch<float>;
    using ib = simd::batch<std::int32_t>;
    if constexpr (std::is_base_of_v<xsimd::avx512f, typename fb::arch_type>) return detail::exp_scalef(x);
    const fb t = xsimd::max(x * fb(1.44269504088896341f), fb(-126.0f));
    const fb n = xsimd::nearbyint(t);
    const fb xc = xsimd::max(x, fb(-88.0f));  // keeps -inf out of the polynomial; such lanes are zeroed below
    fb g = xsimd::fnma(n, fb(0.693145751953125f), xc);  // ln2's high part: exact in n·hi
    g = xsimd::fnma(n, fb(1.428606765330187e-06f), g);   // and its low part
    const fb p = exp_reduced(g);
    const ib bits = xsimd::bitwise_cast<ib>(p) + (xsimd::to_int(n) << 23);
    const fb r = xsimd::select(t > fb(-126.0f), xsimd::bitwise_cast<fb>(bits), fb(0.0f));
    return xsimd::select(xsimd::isnan(x), x, r);  // NaN stays NaN (the clamps above would turn it into 0)
  } else {
    return xsimd::exp(x);
  }
}

}  // namespace xattn::kernel
