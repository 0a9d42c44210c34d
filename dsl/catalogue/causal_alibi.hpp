#pragma once
// Decoder self-attention with ALiBi position biases (Press et al.) and a causal mask, on
// (batch, heads, seq, dim) tensors.
#include <xattn/xattn.hpp>

#include <cmath>

namespace dsl {

// [snippet causal_alibi]
template <class Q, class K, class V>
auto causal_alibi_attention(const Q& queries, const K& keys, const V& values) {
  using namespace xattn;
  const auto d = float(queries.shape()[3]);
  const auto heads = queries.shape()[1];
  auto q = ref(queries), k = ref(keys), v = ref(values);
  return eval(softmax(mask(alibi(q * trans(k) / std::sqrt(d), alibi_op::standard_slopes(heads)), causal())) * v);
}
// [end causal_alibi]

}  // namespace dsl
