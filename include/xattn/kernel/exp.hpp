#pragma once
// 2^t on the kernel's hot path. The softmax works in base 2: scores arrive multiplied by log2(e)
// (folded into the query scale when nothing else needs natural units), so after the running-max
// subtraction every argument t is <= 0 (or -inf) and needs no range reduction by ln2: n = round(t),
// f = t - n (exact), 2^f by a degree-5 polynomial, then 2^n applied by vscalefps on AVX-512 or
// added to the exponent bits otherwise. Max relative error against std::exp2 over [-125, 0]:
// 2.4e-7 (checked by tests/kernel/test_exp.cpp). t < -125 flushes to 0 (no subnormal results), so
// masked (-inf) scores give exactly 0; NaN stays NaN. double uses xsimd::exp2 on arguments
// clamped to [-1100, 0].
#include "../simd/compat.hpp"

#include <type_traits>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

/// The softmax's change of base: e^x = 2^(x · log2 e).
inline constexpr double log2e = 1.44269504088896340736;

/// 2^f for |f| <= 1/2: degree 5, 1 + f·ln2 + f²·q(f) with q interpolating the rest at the
/// Chebyshev nodes: relative error 2.0e-7 in exact arithmetic, and 2^0 = 1 exactly.
inline simd::batch<float> exp2_reduced(const simd::batch<float>& f) noexcept {
  using fb = simd::batch<float>;
  fb p = xsimd::fma(fb(1.338130253e-3f), f, fb(9.666368526e-3f));
  p = xsimd::fma(p, f, fb(5.550381005e-2f));
  p = xsimd::fma(p, f, fb(2.402234902e-1f));
  p = xsimd::fma(p, f, fb(6.931471806e-1f));
  return xsimd::fma(p, f, fb(1.0f));
}

namespace detail {

/// AVX-512: vscalefps applies 2^n, and its masked-zero form flushes t < -125 to 0 in the same
/// instruction; NaN lanes pass the compare (unordered) and stay NaN. A template so that the
/// AVX-512 intrinsics are only instantiated for AVX-512 batches.
template <class B>
inline B exp2_scalef(const B& t) noexcept {
  const __mmask16 keep = _mm512_cmp_ps_mask(t, B(-125.0f), _CMP_NLT_UQ);
  const B tc = xsimd::max(B(-126.0f), t);  // keeps -inf out of the polynomial; vmaxps returns t if NaN
  const B n = xsimd::nearbyint(tc);
  return B(_mm512_maskz_scalef_ps(keep, exp2_reduced(tc - n), n));
}

}  // namespace detail

template <class T>
inline simd::batch<T> exp2_nonpositive(const simd::batch<T>& t) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    using fb = simd::batch<float>;
    using ib = simd::batch<std::int32_t>;
    if constexpr (std::is_base_of_v<xsimd::avx512f, typename fb::arch_type>) {
      return detail::exp2_scalef(t);
    } else {
      const fb tc = xsimd::max(t, fb(-126.0f));  // -inf (and NaN) -> -126; such lanes are replaced below
      const fb n = xsimd::nearbyint(tc);         // 2^f·2^n for n >= -125 is a normal float
      const ib bits = xsimd::bitwise_cast<ib>(exp2_reduced(tc - n)) + (xsimd::to_int(n) << 23);
      const fb r = xsimd::select(tc >= fb(-125.0f), xsimd::bitwise_cast<fb>(bits), fb(0.0f));
      return xsimd::select(xsimd::isnan(t), t, r);
    }
  } else {
    // xsimd's exp2 converts its argument to an integer, which for -inf (a masked score) is
    // undefined behaviour; every t below -1100 gives 0 anyway, and NaN is put back after
    using db = simd::batch<double>;
    return xsimd::select(xsimd::isnan(t), t, xsimd::exp2(xsimd::max(t, db(-1100.0))));
  }
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
