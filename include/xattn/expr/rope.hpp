#pragma once
// rope(Q, positions[, options]): rotary position embeddings on a terminal, applied by the score
// path as it loads queries and packs keys (no rotated copy of the operand): the load transform
// `rotary` (policy/transforms/rotary.hpp) on the terminal.
#include "../policy/transforms/rotary.hpp"
#include "transformed.hpp"

#include <cstdint>
#include <type_traits>
#include <utility>

namespace xattn {

/// A terminal whose rows the score path rotates.
template <class T, std::size_t Rank, bool Packed = false>
using rotary_ref = transformed_ref<T, Rank, Packed, rotary>;

/// rope(X, positions[, options]): X = ref(...) or heads(...); positions (S) or (B, S), any integer type.
template <class T, std::size_t R, bool P, xtensor_expression E>
auto rope(const tensor_ref<T, R, P>& x, E&& positions, rope_options options = {}) {
  static_assert(std::is_integral_v<std::remove_cv_t<typename std::decay_t<E>::value_type>>,
                "xattn: rope(X, positions): positions must hold integers");
  return transformed(x, rotary{make_nd_ref<std::int64_t>(std::forward<E>(positions)), 0, std::move(options)});
}

/// rope(X, offset[, options]): rows at positions offset, offset + 1, ... (decoding from a cache).
template <class T, std::size_t R, bool P, class I>
requires std::is_integral_v<I>
auto rope(const tensor_ref<T, R, P>& x, I offset, rope_options options = {}) {
  return transformed(x, rotary{{}, std::int64_t(offset), std::move(options)});
}

}  // namespace xattn
