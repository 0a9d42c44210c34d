#pragma once
// Register blocking of the two microkernels, the strip layout of packed keys, and the compile-time
// loops that unroll them.
#include "../round_up.hpp"
#include "../simd/compat.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>

namespace xattn::kernel {

using simd::batch;

/// Register blocking: rows broadcast from the left operand x batches of the right one.
/// rows x vecs accumulators + vecs operands + 1 broadcast must fit the register file:
/// 6 x 4 + 5 = 29 of AVX-512's 32, 6 x 2 + 3 = 15 of AVX2's 16 (P·V with at most two rows takes
/// twice the columns: 2 x 8 + 9 = 25, 2 x 4 + 5 = 13).
template <class Acc>
struct blocking {
  static constexpr std::size_t rows = 6;
  static constexpr std::size_t vecs = sizeof(batch<Acc>) >= 64 ? 4 : 2;
};

/// Keys packed for the score product come in strips of strip_width columns (one microkernel's
/// width): strip s holds columns [s·sw, s·sw + sw) as n rows of sw contiguous elements, so the
/// microkernel reads its keys in memory order (prefetch-friendly, no L1 set aliasing).
template <class Acc>
inline constexpr std::size_t strip_width = blocking<Acc>::vecs* simd::width<Acc>;

/// Elements of a packed key panel of `cols` columns (whole strips).
template <class Acc>
constexpr std::size_t packed_kt_size(std::size_t cols, std::size_t n) noexcept {
  return round_up(cols, strip_width<Acc>) * n;
}

/// Which columns (or reduction indices) rows [r, r + R) of a tile operation need: all of them.
/// A tile of a masked block passes a function of (r, R) returning [lo, hi) instead; outside it,
/// every row of the block has weight 0 (an excluding mask), so nothing there is computed.
struct every_column {
  constexpr std::pair<std::size_t, std::size_t> operator()(std::size_t, std::size_t) const noexcept {
    return {0, std::size_t(-1)};
  }
};

/// The ranges of a masked tile whose row i sees the keys [lo[i], hi[i]) (none where lo == hi), or
/// every key where it is not ranged. Named types rather than lambdas, so that the products over
/// them are compiled once per element type (instance_list.hpp) like those over every_column.
/// For products whose rows are query rows: the keys rows [r, r + R) see.
struct keys_seen {
  const std::size_t* lo = nullptr;
  const std::size_t* hi = nullptr;
  bool ranged = false;
  std::pair<std::size_t, std::size_t> operator()(std::size_t r, std::size_t R) const noexcept {
    if (!ranged) return {0, std::size_t(-1)};
    std::size_t first = std::size_t(-1), last = 0;
    for (std::size_t i = r; i < r + R; ++i)
      if (lo[i] < hi[i]) first = std::min(first, lo[i]), last = std::max(last, hi[i]);
    return first < last ? std::pair{first, last} : std::pair<std::size_t, std::size_t>{0, 0};
  }
};

/// For products whose rows are keys: the query rows (of `rows`) that see any of keys [k, k + R).
struct rows_seeing {
  const std::size_t* lo = nullptr;
  const std::size_t* hi = nullptr;
  std::size_t rows = 0;
  bool ranged = false;
  std::pair<std::size_t, std::size_t> operator()(std::size_t k, std::size_t R) const noexcept {
    if (!ranged) return {0, std::size_t(-1)};
    std::size_t first = std::size_t(-1), last = 0;
    for (std::size_t i = 0; i < rows; ++i)
      if (lo[i] < k + R && k < hi[i]) first = std::min(first, i), last = i + 1;
    return first < last ? std::pair{first, last} : std::pair<std::size_t, std::size_t>{0, 0};
  }
};

/// Rows ld elements apart, row j at v + j · ld: a tensor's key or value rows read in place, or a
/// tile's. A named accessor, so that the products reading it are compiled once per element type.
template <class V>
struct strided_rows {
  using element = V;
  const V* v;
  std::ptrdiff_t ld;  // a tensor's rows may run backwards
  const V* operator()(std::size_t j) const noexcept { return v + std::ptrdiff_t(j) * ld; }
  /// The rows from key j0 on, from column c0 on.
  strided_rows at(std::size_t j0, std::size_t c0) const noexcept { return {(*this)(j0) + c0, ld}; }
};

namespace detail {

/// The indices 0, ..., N - 1 for each().
template <std::size_t N>
inline constexpr std::make_index_sequence<N> upto{};

/// each(upto<N>, f): f(0), ..., f(N - 1) with constant indices: the register blocks are unrolled
/// by the language, not left to the optimiser (at -O2 GCC keeps loop-indexed accumulator arrays in
/// memory). f takes a std::size_t, not `auto`, and is marked always_inline: a generic f is a new
/// function per index (a microkernel's instantiations were mostly these), and a plain function
/// called N times is not inlined unless forced, which leaves the accumulators on the stack. The
/// row loads of the 16-bit and int8 formats (load_row_as, dpbf16.hpp, qk_q8.hpp) keep a generic f:
/// forced there, the changed inlining made GCC spill an accumulator of P·V's loop over int8 pages.
/// each is always inlined too: GCC otherwise may call a microkernel's epilogue out of line, the
/// accumulators passed through the stack, when the microkernel has callers in several tile
/// operations.
template <std::size_t... I, class F>
[[gnu::always_inline]] inline void each(std::index_sequence<I...>, F&& f) {
  (f(std::integral_constant<std::size_t, I>{}), ...);
}

/// f(R, r) over rows in register blocks of blocking::rows, then one smaller block for the rest.
template <class Acc, class F>
inline void by_row_blocks(std::size_t rows, F&& f) {
  constexpr std::size_t R = blocking<Acc>::rows;
  static_assert(R <= 6, "by_row_blocks: add remainder cases for larger blocks");
  std::size_t r = 0;
  for (; r + R <= rows; r += R) f(std::integral_constant<std::size_t, R>{}, r);
  switch (rows - r) {
    case 5:
      f(std::integral_constant<std::size_t, 5>{}, r);
      break;
    case 4:
      f(std::integral_constant<std::size_t, 4>{}, r);
      break;
    case 3:
      f(std::integral_constant<std::size_t, 3>{}, r);
      break;
    case 2:
      f(std::integral_constant<std::size_t, 2>{}, r);
      break;
    case 1:
      f(std::integral_constant<std::size_t, 1>{}, r);
      break;
    default:
      break;
  }
}

}  // namespace detail

}  // namespace xattn::kernel
