#pragma once
// d2l's DotProductAttention(dropout): softmax(mask(Q Kᵀ / sqrt(d), valid_lens)) V, one fused pass.
//   xattn::nn::dot_product_attention attention(0.5f, /*seed*/ 42);
//   auto out = attention.forward(queries, keys, values, valid_lens);          // eval mode
//   auto out = attention.forward(queries, keys, values, valid_lens, true);    // training: dropout
//   auto g = attention.backward(d_out);  // g.d_queries, g.d_keys, g.d_values of that call
// Shapes: queries (batch, queries, d), keys (batch, kv, d), values (batch, kv, dv);
// valid_lens (batch) or (batch, queries), any integer type, or xattn::nn::none.
#include "d2l_module.hpp"

#include <array>
#include <cmath>
#include <memory>

namespace xattn::nn {

template <class T = float>
class dot_product_attention : public d2l_module<T> {
 public:
  explicit dot_product_attention(float dropout = 0.0f, std::uint64_t seed = 0)
      : d2l_module<T>("dot_product_attention", dropout, seed) {}

  template <class Q, class K, class V, class Lens = none_t>
  xt::xtensor<T, 3> forward(const Q& queries, const K& keys, const V& values, const Lens& valid_lens = none,
                            bool training = false) {
    static_assert(detail::tensor_inputs<Q, K, V>,
                  "xattn::nn: d2l modules take tensors (batch, seq, size), not attention expressions such as "
                  "rope(...); for rotary embeddings or sinks write the expression, or use dsl::decoder_attention");
    const char* who = "dot_product_attention.forward";
    detail::require_d2l_operand<T>(queries, who, "queries", "(batch, queries, d)");
    detail::require_d2l_operand<T>(keys, who, "keys", "(batch, kv, d)");
    detail::require_d2l_operand<T>(values, who, "values", "(batch, kv, dv)");
    const double d = double(queries.shape()[2]);
    // copies: backward() differentiates these inputs even if the caller's change
    auto in = std::make_shared<const std::array<xt::xtensor<T, 3>, 3>>(
        std::array<xt::xtensor<T, 3>, 3>{queries, keys, values});
    return this->run([in, d] { return ref((*in)[0]) * trans(ref((*in)[1])) / std::sqrt(d); }, valid_lens,
                     [in] { return ref((*in)[2]); }, training);
  }
};

}  // namespace xattn::nn
