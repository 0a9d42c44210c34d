#pragma once
// Keys transposed into the strips the score microkernel reads (see blocking.hpp), converted from
// their storage type to the panel's element type on the way.
#include "blocking.hpp"

#include <algorithm>
#include <cstddef>

namespace xattn::kernel {

/// Packs keys 0..cols-1 (key c's features at row(c)[d * dstride], of any element type) into strips
/// at kt, which holds packed_kt_size<Acc>(cols, n) elements; columns past cols are zero.
template <class P, class Acc = P, class RowFn>
void pack_kt(RowFn row, std::size_t cols, std::size_t n, std::ptrdiff_t dstride, P* kt) {
  constexpr std::size_t sw = strip_width<Acc>;
  if (const std::size_t tail = cols % sw; tail != 0) {  // only the last strip has columns past cols
    P* last = kt + cols / sw * sw * n;
    for (std::size_t d = 0; d < n; ++d) std::fill(last + d * sw + tail, last + d * sw + sw, P(0));
  }
  for (std::size_t c = 0; c < cols; ++c) {
    const auto* r = row(c);
    P* dst = kt + c / sw * sw * n + c % sw;
    for (std::size_t d = 0; d < n; ++d) dst[d * sw] = P(r[std::ptrdiff_t(d) * dstride]);
  }
}

}  // namespace xattn::kernel
