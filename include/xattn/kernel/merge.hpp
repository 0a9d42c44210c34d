#pragma once
// Attention over disjoint key sets combined exactly: softmax over a union is the lse-weighted mix
// of the parts' results (FlashAttention's split-KV, ring attention). Used for the decoding split
// and by xattn::merge.
#include "trace.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <limits>

namespace xattn::kernel {

/// At most this many parts are merged at once (the decoding split makes at most 8).
inline constexpr std::size_t max_merged_parts = 16;

/// out[d · stride] = Σ_c e^(lse(c) − m) part(c)[d] / Σ_c e^(lse(c) − m) for d < dv, parts c in
/// order, m = max_c lse(c); returns the merged log-sum-exp. A row no part saw a key of (every
/// lse = −inf) becomes 0 with lse −inf.
template <class T, class LseFn, class PartFn, class Out>
T merge_row(std::size_t parts, LseFn lse, PartFn part, std::size_t dv, Out* out, std::ptrdiff_t stride) {
  trace::note({operation::merge_row});
  assert(parts <= max_merged_parts);
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  T m = ninf;
  for (std::size_t c = 0; c < parts; ++c) m = std::max<T>(m, T(lse(c)));
  if (m == ninf) {
    for (std::size_t d = 0; d < dv; ++d) out[std::ptrdiff_t(d) * stride] = Out(0);
    return ninf;
  }
  std::array<T, max_merged_parts> w{};
  T z = 0;
  for (std::size_t c = 0; c < parts; ++c) z += w[c] = std::exp(T(lse(c)) - m);
  for (std::size_t d = 0; d < dv; ++d) {
    T o = 0;
    for (std::size_t c = 0; c < parts; ++c) o += w[c] * T(part(c)[d]);
    out[std::ptrdiff_t(d) * stride] = Out(o / z);
  }
  return m + std::log(z);
}

}  // namespace xattn::kernel
