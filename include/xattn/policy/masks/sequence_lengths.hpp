#pragma once
// The keys each batch row has when its keys are one of a cache's sequences: key j of batch row b
// exists iff j < the sequence's length. Planning adds this mask itself whenever K or V come from
// a kv_cache, outermost, so keys past a sequence's end are excluded whatever the user's masks fill,
// and key blocks past it are skipped without being read.
#include "../problem.hpp"

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace xattn {

struct sequence_lengths_mask {
  std::vector<std::size_t> lens;  // set by bind

  bool visible(std::size_t b, std::size_t, std::size_t, std::size_t j) const noexcept { return j < lens[b]; }
  block classify(std::size_t b, std::size_t, std::size_t, std::size_t, std::size_t j0, std::size_t j1) const {
    if (j1 <= lens[b]) return block::visible;
    if (j0 >= lens[b]) return block::hidden;
    return block::partial;
  }
  std::pair<std::int64_t, std::int64_t> row_span(std::size_t b, std::size_t, std::size_t) const noexcept {
    return {0, std::int64_t(lens[b])};
  }

  sequence_lengths_mask bind(const problem& pr) const {
    sequence_lengths_mask m;
    for (std::size_t b = 0; b < pr.batch; ++b) m.lens.push_back(pr.keys_of(b));
    return m;
  }
};

}  // namespace xattn
