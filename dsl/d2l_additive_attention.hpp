#pragma once
// d2l's AdditiveAttention: score(q, k) = w_v·tanh(W_q q + W_k k), queries and keys of different
// sizes. W_q (h, query_size), W_k (h, key_size), w_v (h).
#include <xattn/xattn.hpp>

namespace dsl {

// [snippet d2l_additive_attention]
template <class Q, class K, class V, class Lens, class Wq, class Wk, class Wv>
auto additive_attention(const Q& queries, const K& keys, const V& values, const Lens& valid_lens, const Wq& w_q,
                        const Wk& w_k, const Wv& w_v) {
  using namespace xattn;
  auto q = ref(queries), k = ref(keys), v = ref(values);
  return eval(softmax(mask(score(additive{w_q, w_k, w_v}, q, k), lengths(valid_lens))) * v);
}
// [end d2l_additive_attention]

}  // namespace dsl
