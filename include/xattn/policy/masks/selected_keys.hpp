#pragma once
// The keys a selection (select(K, idx)) holds: column t of query i exists iff idx(b, hk, i, t) is
// not negative (an indexer's shorter list padded with -1). Planning adds it, outermost, to every
// plan whose keys are a selection; the evaluator sets the query of each pass (i).
#include "../../layout.hpp"
#include "../problem.hpp"

#include <cstddef>

namespace xattn {

template <class I>
struct selected_keys_mask {
  strided_view<const I, 4> idx;  // (B, Hkv, Sq, k)
  std::size_t i = 0;             // the query of the pass
  std::size_t group = 1;         // query heads per key head (bind)

  bool visible(std::size_t b, std::size_t h, std::size_t, std::size_t t) const noexcept {
    return idx(b, h / group, i, t) >= 0;
  }
  block classify(std::size_t b, std::size_t h, std::size_t, std::size_t, std::size_t j0, std::size_t j1) const {
    std::size_t hidden = 0;
    for (std::size_t t = j0; t < j1; ++t) hidden += idx(b, h / group, i, t) < 0;
    return hidden == 0 ? block::visible : hidden == j1 - j0 ? block::hidden : block::partial;
  }

  selected_keys_mask bind(const problem& pr) const {
    selected_keys_mask m = *this;
    m.group = pr.q_heads / (pr.kv_heads ? pr.kv_heads : 1);
    return m;
  }
};

}  // namespace xattn
