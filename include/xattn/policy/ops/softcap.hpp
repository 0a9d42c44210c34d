#pragma once
// softcap: s -> c * tanh(s / c) (Gemma, ONNX Attention). Applied to scores before any mask, so
// masked (-inf) entries stay masked.
#include "../../error.hpp"
#include "../../simd/compat.hpp"
#include "../problem.hpp"

#include <cmath>
#include <cstddef>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn {

struct softcap_op {
  double cap;

  template <class U>
  U operator()(U s, std::size_t, std::size_t, std::size_t, std::size_t) const {
    using std::tanh;  // unqualified: runs on xattn::dual too (the backward's derivative)
    return U(cap) * tanh(s / U(cap));
  }

  template <class T>
  void apply_row(T* s, std::size_t n, std::size_t, std::size_t, std::size_t, std::size_t) const {
    constexpr std::size_t w = simd::width<T>;
    const simd::batch<T> c(static_cast<T>(cap)), inv(static_cast<T>(1 / cap));
    std::size_t j = 0;
    for (; j + w <= n; j += w) simd::store(s + j, c * xsimd::tanh(simd::load(s + j) * inv));
    for (; j < n; ++j) s[j] = (*this)(s[j], 0, 0, 0, 0);
  }

  softcap_op bind(const problem&) const {
    if (!(cap > 0) || !std::isfinite(cap)) fail("softcap(scores, c): c must be finite and > 0, got ", cap);
    return *this;
  }
};

}  // namespace xattn

#pragma GCC diagnostic pop
