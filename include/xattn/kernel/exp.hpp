#pragma once
// exp on the kernel's hot path. After the running-max subtraction every argument is <= 0 (or -inf),
// so float uses a short polynomial instead of xsimd::exp: n = round(x·log2 e), g = x - n·ln2
// (ln2 split in two so g keeps full precision, Cody-Waite), e^g by its degree-6 Taylor polynomial
// (|g| <= ln2/2: truncation < (ln2/2)^7/7! = 1.2e-7 relative), 2^n added to the exponent bits. Measured max relative
// error against std::exp over [-87, 0]: see tests/kernel/test_exp.cpp (2.2e-7 measured, vs 1.25e-7 for
// xsimd::exp), at about 1.6x the throughput. Results below 2^-126 (x < -87.3) flush to 0, so
// masked (-inf) scores give exactly 0. double keeps xsimd::exp: the tests compare against it.
#include "../simd/compat.hpp"

#include <type_traits>

namespace xattn::kernel {

template <class T>
inline simd::batch<T> exp_nonpositive(const simd::batch<T>& x) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    using fb = simd::batch<float>;
    using ib = simd::batch<std::int32_t>;
    const fb t = xsimd::max(x * fb(1.44269504088896341f), fb(-126.0f));
    const fb n = xsimd::nearbyint(t);
    const fb xc = xsimd::max(x, fb(-88.0f));  // keeps -inf out of the polynomial; such lanes are zeroed below
    fb g = xsimd::fnma(n, fb(0.693145751953125f), xc);  // ln2's high part: exact in n·hi
    g = xsimd::fnma(n, fb(1.428606765330187e-06f), g);   // and its low part
    fb p = fb(1.0f / 720);
    p = xsimd::fma(p, g, fb(1.0f / 120));
    p = xsimd::fma(p, g, fb(1.0f / 24));
    p = xsimd::fma(p, g, fb(1.0f / 6));
    p = xsimd::fma(p, g, fb(0.5f));
    p = xsimd::fma(p, g, fb(1.0f));
    p = xsimd::fma(p, g, fb(1.0f));
    const ib bits = xsimd::bitwise_cast<ib>(p) + (xsimd::to_int(n) << 23);
    const fb r = xsimd::select(t > fb(-126.0f), xsimd::bitwise_cast<fb>(bits), fb(0.0f));
    return xsimd::select(xsimd::isnan(x), x, r);  // NaN stays NaN (the clamps above would turn it into 0)
  } else {
    return xsimd::exp(x);
  }
}

}  // namespace xattn::kernel
