#pragma once
// A fixed rotation of key rows before they are quantized (kv_cache_options::rotate): the
// normalised Walsh-Hadamard transform on blocks of features, which spreads an outlier feature
// over its block so that a group's scale no longer follows it (QuaRot; llama.cpp rotates its
// quantized KV caches so). It is orthogonal and its own inverse: q·k is unchanged when the
// queries turn too.
#include <cmath>
#include <cstddef>

namespace xattn::kernel {

/// The block a rotation of rows of n features uses: the largest power of two dividing n (n = 96:
/// three blocks of 32).
inline std::size_t hadamard_block(std::size_t n) noexcept { return n & (~n + 1); }

/// x[0, n) turned by the normalised Hadamard matrix of each block of `block` features (a power of
/// two dividing n): H[i][j] = (-1)^popcount(i & j) / sqrt(block), by the fast transform.
template <class T>
void hadamard_row(T* x, std::size_t n, std::size_t block) noexcept {
  const T s = T(1) / std::sqrt(T(block));
  for (std::size_t b0 = 0; b0 < n; b0 += block) {
    T* y = x + b0;
    for (std::size_t h = 1; h < block; h *= 2)
      for (std::size_t i = 0; i < block; i += 2 * h)
        for (std::size_t j = i; j < i + h; ++j) {
          const T a = y[j], c = y[j + h];
          y[j] = a + c;
          y[j + h] = a - c;
        }
    for (std::size_t j = 0; j < block; ++j) y[j] *= s;
  }
}

}  // namespace xattn::kernel
