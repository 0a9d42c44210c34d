#pragma once
// A block of rows as the microkernels read them: in place when they already are contiguous rows
// of the accumulator type in whole batches, else converted into a buffer.
#include "../../kernel/rows.hpp"

#include <cstddef>
#include <type_traits>
#include <utility>

namespace xattn {

/// Rows [i0, i0 + rows) of head (b, h) of view x (n elements each): in place when they are
/// contiguous Acc rows of whole batches (n == np; reading the padding would leave the row), else
/// copied into buf (np apart, the padding left as it is). Returns the first row and the distance
/// between rows.
template <class Acc, class View>
std::pair<const Acc*, std::size_t> tile_rows(const View& x, std::size_t b, std::size_t h, std::size_t i0,
                                             std::size_t rows, std::size_t n, std::size_t np, Acc* buf) {
  using E = std::remove_cv_t<std::remove_reference_t<decltype(*x.data)>>;
  if constexpr (std::is_same_v<E, Acc>)
    if (x.inner_stride() == 1 && n == np && x.at.stride[2] > 0) return {x.row(b, h, i0), std::size_t(x.at.stride[2])};
  for (std::size_t r = 0; r < rows; ++r)
    kernel::scaled_copy(x.row(b, h, i0 + r), x.inner_stride(), n, Acc(1), buf + r * np, 1);
  return {buf, np};
}

}  // namespace xattn
