#pragma once
// Counter-based dropout: every keep/drop decision is a pure function of
// (seed, batch, head, query, key), so a mask never has to be stored — the forward
// pass, the backward pass and any tiling of either recompute exactly the same one.
//
// Mapping onto Philox4x32-10 (random/philox.hpp; 4-word counter, 2-word key):
//   key     = { seed & 0xffffffff, seed >> 32 }
//   counter = { b, h, i, j / 4 }
//   word    = output[j % 4]
//   keep   <=> word >= threshold,  threshold = round(p * 2^32)
// (b, h, i, j / 4) -> counter is injective for all 32-bit indices (j / 4 < 2^30
// fits a word), and Philox is a bijection of the counter for a fixed key, so no two
// decisions ever share a word. One Philox call serves 4 consecutive keys.
//
// p is a float, so p * 2^32 is exact in double and at most 2^32 - 2^8 for p < 1:
// the threshold always fits 32 bits and P(keep) = 1 - threshold / 2^32 differs from
// 1 - p by at most 2^-33. p = 0 gives threshold 0: every word passes.

#include "philox.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace xattn::random {

struct dropout {
  double p = 0.0;          // probability of dropping a weight, in [0, 1)
  std::uint64_t seed = 0;  // Philox key; reuse it in the backward pass
  // Where the evaluated block starts in the whole problem (context parallelism): decisions are
  // drawn for (b, h, i0 + i, j0 + j), so every split of the problem draws the same ones.
  std::uint32_t i0 = 0, j0 = 0;

  void check() const {
    // Written so that NaN fails too.
    if (!(p >= 0.0 && p < 1.0)) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%g", p);
      throw std::invalid_argument(std::string("xattn: dropout p must be in [0, 1), got ") + buf);
    }
  }
};

// Words below this are dropped. Precondition: p in [0, 1) (dropout::check).
inline std::uint32_t drop_threshold(double p) noexcept {
  const long long t = std::llround(p * 4294967296.0);
  return static_cast<std::uint32_t>(std::clamp(t, 0LL, 4294967295LL));
}

// Survivors are scaled by this so the expected weight is unchanged.
inline double keep_scale(double p) noexcept { return 1.0 / (1.0 - p); }

namespace detail {

inline philox_counter philox_block(std::uint64_t seed, std::uint32_t b, std::uint32_t h, std::uint32_t i,
                                   std::uint32_t block) noexcept {
  return philox4x32_10({b, h, i, block}, {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}

// Calls f(offset, keep) for offset = 0 .. n-1, key j = j0 + offset. Each key's
// decision depends only on its own (b, h, i, j), which is what makes every
// split of a row into chunks agree with the scalar keep().
template <class F>
void for_each_keep(const dropout& d, std::uint32_t b, std::uint32_t h, std::uint32_t i, std::uint32_t j0, std::size_t n,
                   F&& f) {
  d.check();
  i += d.i0;
  const std::uint64_t first = std::uint64_t{j0} + d.j0;  // the key's position in the whole problem
  // Key indices are 32-bit; compared this way round so first + n cannot wrap.
  if (first >= (std::uint64_t{1} << 32) || static_cast<std::uint64_t>(n) > (std::uint64_t{1} << 32) - first) {
    throw std::invalid_argument("xattn: dropout row of n = " + std::to_string(n) +
                                " keys from j0 = " + std::to_string(first) + " runs past key 2^32 - 1");
  }
  const std::uint64_t end = first + static_cast<std::uint64_t>(n);
  const std::uint32_t t = drop_threshold(d.p);
  if (t == 0) {  // p == 0 (or below 2^-33): every word passes, skip Philox entirely
    for (std::size_t k = 0; k < n; ++k) f(k, true);
    return;
  }
  std::uint64_t j = first;
  while (j < end) {
    const auto words = philox_block(d.seed, b, h, i, static_cast<std::uint32_t>(j >> 2));
    const std::uint64_t stop = std::min(end, (j | 3) + 1);  // end of this block of 4
    for (; j < stop; ++j) f(static_cast<std::size_t>(j - first), words[j & 3] >= t);
  }
}

template <class T>
void scale_row_impl(const dropout& d, std::uint32_t b, std::uint32_t h, std::uint32_t i, std::uint32_t j0,
                    std::size_t n, T* weights) {
  const T scale = static_cast<T>(keep_scale(d.p));
  // Select rather than multiply by 0 so a dropped weight is exactly +0.
  for_each_keep(d, b, h, i, j0, n, [&](std::size_t k, bool kept) { weights[k] = kept ? weights[k] * scale : T(0); });
}

}  // namespace detail

// Scalar decision for one (batch b, head h, query i, key j).
inline bool keep(const dropout& d, std::uint32_t b, std::uint32_t h, std::uint32_t i, std::uint32_t j) {
  d.check();
  i += d.i0, j += d.j0;
  return detail::philox_block(d.seed, b, h, i, j >> 2)[j & 3] >= drop_threshold(d.p);
}

// out[k] = keep(d, b, h, i, j0 + k) ? 1 : 0 for k < n. Requires j0 + n <= 2^32.
inline void keep_mask_row(const dropout& d, std::uint32_t b, std::uint32_t h, std::uint32_t i, std::uint32_t j0,
                          std::size_t n, std::uint8_t* out) {
  detail::for_each_keep(d, b, h, i, j0, n, [out](std::size_t k, bool kept) { out[k] = kept ? 1 : 0; });
}

// weights[k] becomes weights[k] * T(1 / (1 - p)) if kept, else exactly 0, with
// the same decisions as keep(). The scale is computed in double, then rounded to T.
inline void scale_row(const dropout& d, std::uint32_t b, std::uint32_t h, std::uint32_t i, std::uint32_t j0,
                      std::size_t n, float* weights) {
  detail::scale_row_impl(d, b, h, i, j0, n, weights);
}

inline void scale_row(const dropout& d, std::uint32_t b, std::uint32_t h, std::uint32_t i, std::uint32_t j0,
                      std::size_t n, double* weights) {
  detail::scale_row_impl(d, b, h, i, j0, n, weights);
}

}  // namespace xattn::random

#if defined(XATTN_PRECOMPILED_KERNELS)  // compiled once into libxattn_kernels (src/kernels.cpp)
namespace xattn::random::detail {
extern template void scale_row_impl<float>(const dropout&, std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t,
                                           std::size_t, float*);
extern template void scale_row_impl<double>(const dropout&, std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t,
                                            std::size_t, double*);
}  // namespace xattn::random::detail
#endif
