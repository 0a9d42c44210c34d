#pragma once
// The score modifiers on a row of a tile, in order: each by its own apply_row when it has one
// (vectorised), else element by element. The forward and the backward's recomputed scores both
// take this one way, so they agree bit for bit.
#include "../../hana.hpp"
#include "../../policy/concepts.hpp"

#include <cstddef>
#include <type_traits>

namespace xattn {

/// s[0, cols) of query (b, h, i) at keys j0.. through every modifier of ops.
template <class Acc, class Ops>
void apply_modifiers(const Ops& ops, Acc* s, std::size_t cols, std::size_t b, std::size_t h, std::size_t i,
                     std::size_t j0) {
  hana::for_each(ops, [&](const auto& op) {
    if constexpr (has_apply_row<std::decay_t<decltype(op)>, Acc>)
      op.apply_row(s, cols, b, h, i, j0);
    else
      for (std::size_t c = 0; c < cols; ++c) s[c] = Acc(op(s[c], b, h, i, j0 + c));
  });
}

}  // namespace xattn
