#pragma once
// Keys transposed into the strips the score microkernel reads (see blocking.hpp), converted from
// their storage type to the panel's element type on the way.
#include "blocking.hpp"
#include "q8_row.hpp"
#include "trace.hpp"
#include "transpose.hpp"

#include <algorithm>
#include <cstddef>

namespace xattn::kernel {

/// Packs keys 0..cols-1 (key c's features at row(c)[d * dstride], of any element type) into strips
/// at kt, which holds packed_kt_size<Acc>(cols, n) elements; columns past cols are zero.
template <class P, class Acc = P, class RowFn>
void pack_kt(RowFn row, std::size_t cols, std::size_t n, std::ptrdiff_t dstride, P* kt) {
  trace::note(op_on<P>(operation::pack_kt));
  constexpr std::size_t sw = strip_width<Acc>;
  if (const std::size_t tail = cols % sw; tail != 0) {  // only the last strip has columns past cols
    P* last = kt + cols / sw * sw * n;
    for (std::size_t d = 0; d < n; ++d) std::fill(last + d * sw + tail, last + d * sw + sw, P(0));
  }
  std::size_t c = 0;
  if constexpr (std::is_same_v<P, Acc> && has_transpose_square<Acc>) {
    // w keys x w features at a time: w row loads (widened from 16 bits in registers), one
    // transpose, w stores; the features past the last whole w go element by element.
    constexpr std::size_t w = simd::width<Acc>;
    const std::size_t nw = dstride == 1 ? n / w * w : 0;
    std::array<batch<Acc>, w> r;
    for (; nw > 0 && c + w <= cols; c += w) {
      P* dst = kt + c / sw * sw * n + c % sw;
      for (std::size_t d0 = 0; d0 < nw; d0 += w) {
        for (std::size_t i = 0; i < w; ++i) r[i] = simd::load_as<Acc>(row(c + i) + d0);
        transpose_square<Acc>(r);
        for (std::size_t d = 0; d < w; ++d) simd::store(dst + (d0 + d) * sw, r[d]);
      }
      for (std::size_t i = 0; i < w; ++i)
        for (std::size_t d = nw; d < n; ++d) dst[d * sw + i] = P(row(c + i)[d]);
    }
  }
  for (; c < cols; ++c) {
    const auto r = row(c);
    P* dst = kt + c / sw * sw * n + c % sw;
    for (std::size_t d = 0; d < n; ++d) dst[d * sw] = P(r[std::ptrdiff_t(d) * dstride]);
  }
}

/// Packs rows 0..rows-1 (row i's elements at row(i)[d * dstride], d < n, of any element type)
/// into strips of strip_width columns: strip s holds columns [s·sw, s·sw + sw) of every row, sw
/// contiguous elements per row, at out + s · strip_stride (strip_stride >= rows · sw); columns
/// past n are zero, up to whole strips. The right operand of pv_tile_strips: a register block
/// then reads its values in memory order, one cache line per row, where rows read in place are
/// a row stride apart (256 or 512 bytes at D = 64 or 128: a few L1 sets, and a miss per row).
template <class P, class Acc = P, class RowFn>
void pack_strips(RowFn row, std::size_t rows, std::size_t n, std::ptrdiff_t dstride, P* out, std::size_t strip_stride) {
  trace::note(op_on<P>(operation::pack_strips));
  constexpr std::size_t sw = strip_width<Acc>;
  const std::size_t whole = dstride == 1 ? n / sw : 0;  // strips copied a batch at a time
  for (std::size_t i = 0; i < rows; ++i) {
    const auto x = row(i);
    for (std::size_t s = 0; s < whole; ++s) {
      P* dst = out + s * strip_stride + i * sw;
      if constexpr (std::is_same_v<P, Acc>)
        for (std::size_t c = 0; c < sw; c += simd::width<Acc>) simd::store(dst + c, simd::load_as<Acc>(x + s * sw + c));
      else
        for (std::size_t c = 0; c < sw; ++c) dst[c] = P(x[s * sw + c]);
    }
    for (std::size_t d = whole * sw; d < round_up(n, sw); ++d)
      out[d / sw * strip_stride + i * sw + d % sw] = d < n ? P(x[std::ptrdiff_t(d) * dstride]) : P(0);
  }
}

}  // namespace xattn::kernel
