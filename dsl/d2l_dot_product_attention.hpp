#pragma once
// d2l's DotProductAttention.forward: softmax(mask(QKᵀ/√d, valid_lens)) V, one fused pass; the
// weights (d2l's attention_weights) are a second expression, materialised only when asked for.
#include <xattn/xattn.hpp>

#include <cmath>

namespace dsl {

// [snippet d2l_dot_product_attention]
template <class Q, class K, class V, class Lens>
auto dot_product_attention(const Q& queries, const K& keys, const V& values, const Lens& valid_lens) {
  using namespace xattn;
  const auto d = float(queries.shape().back());
  auto q = ref(queries), k = ref(keys), v = ref(values);
  return eval(softmax(mask(q * trans(k) / std::sqrt(d), lengths(valid_lens))) * v);
}
// [end d2l_dot_product_attention]

// [snippet d2l_dot_product_weights]
template <class Q, class K, class Lens>
auto dot_product_weights(const Q& queries, const K& keys, const Lens& valid_lens) {
  using namespace xattn;
  const auto d = float(queries.shape().back());
  auto q = ref(queries), k = ref(keys);
  return eval(softmax(mask(q * trans(k) / std::sqrt(d), lengths(valid_lens))));
}
// [end d2l_dot_product_weights]

}  // namespace dsl
