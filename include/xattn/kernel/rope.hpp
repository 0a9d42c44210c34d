#pragma once
// Rotary position embeddings on one row (RoPE, Su et al.), as HF transformers' apply_rotary_pos_emb
// computes them: feature pairs of the first `dims` features turned by the angles pos · inv_freq[k],
// the rest copied. The pairs are (k, k + dims/2) for rope_style::half (LLaMA, GPT-NeoX) and
// (2k, 2k + 1) for rope_style::interleaved (GPT-J). The angle is a float product and its cosine and
// sine are rounded to float, as HF's float32 tables are: at positions near 2^20 the float angle is
// off from the exact one by up to 2^20 · 2^-24 = 1/16 radian, in HF as here.
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace xattn {

/// Which features a rotation pairs: (k, k + dims/2) or (2k, 2k + 1).
enum class rope_style { half, interleaved };

}  // namespace xattn

namespace xattn::kernel {

/// HF's inverse frequencies: inv_freq[k] = 1 / base^(2k / dims) for k < dims / 2, in float.
inline void rope_inverse_frequencies(float base, std::size_t dims, float* inv_freq) {
  for (std::size_t k = 0; k < dims / 2; ++k) inv_freq[k] = 1.0f / std::pow(base, float(2 * k) / float(dims));
}

/// cos[k] and sin[k] of the angle pos · inv_freq[k] (a float product), for k < half, by float
/// sincos (within an ulp, as torch's float cos and sin are): a third of the time of double cos and
/// sin, which a table of every row's angles pays once per evaluation.
inline void rope_angles(std::int64_t pos, const float* inv_freq, std::size_t half, float* cos, float* sin) {
  for (std::size_t k = 0; k < half; ++k) ::sincosf(float(pos) * inv_freq[k], sin + k, cos + k);
}

/// out[d] = c · (row x rotated), d < n: x's n features `xs` apart (any element type), the first
/// dims of them turned by (cos, sin) of dims / 2 angles, computed in T.
template <class X, class T>
void rope_row(const X* x, std::ptrdiff_t xs, std::size_t n, std::size_t dims, rope_style style, const float* cos,
              const float* sin, T c, T* out) {
  const std::size_t half = dims / 2;
  if (xs == 1 && style == rope_style::half) {  // contiguous halves: a loop the compiler vectorises
    const X* xb = x + half;
    T* ob = out + half;
    for (std::size_t k = 0; k < half; ++k) {
      const T a = T(x[k]), b = T(xb[k]), ck = T(cos[k]), sk = T(sin[k]);
      out[k] = c * (a * ck - b * sk);
      ob[k] = c * (b * ck + a * sk);
    }
    for (std::size_t d = dims; d < n; ++d) out[d] = c * T(x[d]);
    return;
  }
  const auto at = [&](std::size_t d) { return T(x[std::ptrdiff_t(d) * xs]); };
  for (std::size_t k = 0; k < half; ++k) {
    const std::size_t a = style == rope_style::half ? k : 2 * k, b = style == rope_style::half ? k + half : 2 * k + 1;
    const T xa = at(a), xb = at(b), ck = T(cos[k]), sk = T(sin[k]);
    out[a] = c * (xa * ck - xb * sk);
    out[b] = c * (xb * ck + xa * sk);
  }
  for (std::size_t d = dims; d < n; ++d) out[d] = c * at(d);
}

/// g = Rᵀ g in place (g's n features `gs` apart): the gradient at a rotated row taken back to the
/// row itself. The rotation is orthogonal, so its transpose turns by the opposite angles.
template <class T>
void rope_row_transposed(T* g, std::ptrdiff_t gs, std::size_t dims, rope_style style, const float* cos,
                         const float* sin) {
  const std::size_t half = dims / 2;
  if (gs == 1 && style == rope_style::half) {
    T* gb = g + half;
    for (std::size_t k = 0; k < half; ++k) {
      const T ck = T(cos[k]), sk = T(sin[k]), va = g[k], vb = gb[k];
      g[k] = va * ck + vb * sk;
      gb[k] = vb * ck - va * sk;
    }
    return;
  }
  for (std::size_t k = 0; k < half; ++k) {
    const std::size_t a = style == rope_style::half ? k : 2 * k, b = style == rope_style::half ? k + half : 2 * k + 1;
    T& ga = g[std::ptrdiff_t(a) * gs];
    T& gb = g[std::ptrdiff_t(b) * gs];
    const T ck = T(cos[k]), sk = T(sin[k]), va = ga, vb = gb;
    ga = va * ck + vb * sk;
    gb = vb * ck - va * sk;
  }
}

}  // namespace xattn::kernel
