#pragma once
// Attention over a shard of the keys, with its per-row log-sum-exp, and the exact merge of two
// shards: softmax over a union of disjoint key sets is the lse-weighted mix of the shards'
// results (FlashAttention's split-K / ring attention). The log-sum-exp is over the visible keys'
// final scores (masked_rows::uniform fills count as visible) and the sink, if any: merging two
// parts that both have sinks counts the sink twice.
#include "../../error.hpp"
#include "../../kernel/merge.hpp"

namespace xattn {

template <class Out, class Lse>
struct partial_attention {
  Out output;  // as eval() returns it
  Lse lse;     // (B, Sq) for (B, S, D) queries, (B, H, Sq) for 4-D, (B, Sq, H) for heads(): output's row order
};

/// Combine attention computed over two disjoint sets of keys into attention over their union.
template <class Out, class Lse>
partial_attention<Out, Lse> merge(const partial_attention<Out, Lse>& a, const partial_attention<Out, Lse>& b) {
  if (a.output.shape() != b.output.shape() || a.lse.shape() != b.lse.shape())
    fail("merge(a, b): partial results differ in shape: outputs ", shape_str(a.output.shape()), " and ",
         shape_str(b.output.shape()), ", lse ", shape_str(a.lse.shape()), " and ", shape_str(b.lse.shape()));
  using T = typename Lse::value_type;
  partial_attention<Out, Lse> r{a.output, a.lse};
  const std::size_t rows = a.lse.size(), dv = rows == 0 ? 0 : a.output.size() / rows;
  for (std::size_t n = 0; n < rows; ++n) {
    const T lse[2] = {a.lse.data()[n], b.lse.data()[n]};
    const typename Out::value_type* part[2] = {a.output.data() + n * dv, b.output.data() + n * dv};
    r.lse.data()[n] = kernel::merge_row<T>(
        2, [&](std::size_t c) { return lse[c]; }, [&](std::size_t c) { return part[c]; }, dv, r.output.data() + n * dv,
        1);
  }
  return r;
}

}  // namespace xattn
