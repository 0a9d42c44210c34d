#pragma once
// causal: query i sees key j iff j <= i + offset. top_left: offset 0 (PyTorch is_causal, ONNX
// without cache); bottom_right: offset Skv - Sq (FlashAttention, decoding with a cache);
// causal_offsets(o): one offset per batch (ONNX's nonpad_kv_seqlen[b] - Sq), possibly negative.
// Over a cache's sequences, bottom_right aligns each batch row with its own sequence's length.
// Masked keys are excluded; a row that sees nothing gets a zero output.
#include "../../error.hpp"
#include "../problem.hpp"

#include <cstdint>
#include <utility>
#include <vector>

namespace xattn {

enum class align { top_left, bottom_right };

struct causal_mask {
  align where = align::top_left;
  std::vector<std::int64_t> per_batch;  // optional explicit offsets
  std::int64_t shift = 0;               // set by bind

  std::int64_t offset(std::size_t b) const noexcept { return per_batch.empty() ? shift : per_batch[b]; }
  bool visible(std::size_t b, std::size_t, std::size_t i, std::size_t j) const noexcept {
    return std::int64_t(j) <= std::int64_t(i) + offset(b);
  }
  std::pair<std::int64_t, std::int64_t> row_span(std::size_t b, std::size_t, std::size_t i) const noexcept {
    return {0, std::int64_t(i) + offset(b) + 1};
  }
  block classify(std::size_t b, std::size_t, std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) const {
    const std::int64_t o = offset(b);
    if (std::int64_t(j0) > std::int64_t(i1) - 1 + o) return block::hidden;
    if (std::int64_t(j1) - 1 <= std::int64_t(i0) + o) return block::visible;
    return block::partial;
  }

  causal_mask bind(const problem& pr) const {
    if (!per_batch.empty() && per_batch.size() != pr.batch)
      fail("causal_offsets(o): o has ", per_batch.size(), " entries but the batch is ", pr.batch);
    causal_mask b = *this;
    b.shift = where == align::top_left ? 0 : pr.bottom_right_shift(0);
    if (per_batch.empty() && where == align::bottom_right && !pr.kv_lens.empty())  // each sequence its own
      for (std::size_t n = 0; n < pr.batch; ++n) b.per_batch.push_back(pr.bottom_right_shift(n));
    return b;
  }
};

inline causal_mask causal(align where = align::top_left) { return {where, {}, 0}; }

template <class E>
causal_mask causal_offsets(const E& offsets) {
  causal_mask m;
  for (auto v : offsets) m.per_batch.push_back(std::int64_t(v));
  return m;
}

}  // namespace xattn
