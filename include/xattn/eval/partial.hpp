#pragma once
// Attention over a shard of the keys, with its per-row log-sum-exp, and the exact merge of two
// shards: softmax over a union of disjoint key sets is the lse-weighted mix of the shards'
// results (FlashAttention's split-K / ring attention). The log-sum-exp is over the visible keys'
// final scores (masked_rows::uniform fills count as visible).
#include "../detail/format.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

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
    detail::fail("merge(a, b): partial results differ in shape: outputs ", detail::shape_str(a.output.shape()), " and ",
                 detail::shape_str(b.output.shape()), ", lse ", detail::shape_str(a.lse.shape()), " and ",
                 detail::shape_str(b.lse.shape()));
  using T = typename Out::value_type;
  partial_attention<Out, Lse> r{a.output, a.lse};
  const std::size_t rows = a.lse.size(), dv = rows == 0 ? 0 : a.output.size() / rows;
  for (std::size_t n = 0; n < rows; ++n) {
    const T la = a.lse.flat(n), lb = b.lse.flat(n), m = std::max(la, lb);
    if (m == -std::numeric_limits<T>::infinity()) {  // neither shard saw a key
      r.lse.flat(n) = m;
      for (std::size_t d = 0; d < dv; ++d) r.output.flat(n * dv + d) = 0;
      continue;
    }
    const T wa = std::exp(la - m), wb = std::exp(lb - m), z = wa + wb;
    r.lse.flat(n) = m + std::log(z);
    for (std::size_t d = 0; d < dv; ++d)
      r.output.flat(n * dv + d) = (wa * a.output.flat(n * dv + d) + wb * b.output.flat(n * dv + d)) / z;
  }
  return r;
}

}  // namespace xattn
