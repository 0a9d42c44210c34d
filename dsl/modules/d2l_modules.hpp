#pragma once
// d2l's attention modules used as the book uses them (section "Attention Scoring Functions"):
//   attention = DotProductAttention(dropout=0.5); attention.eval()
//   attention(queries, keys, values, valid_lens); attention.attention_weights
//   attention = AdditiveAttention(num_hiddens=8, dropout=0.1); ...
#include "../seeds_example.hpp"

#include <xattn/nn/nn.hpp>

namespace dsl {

struct d2l_module_run {
  xt::xtensor<float, 3> dot_output, additive_output;    // (2, 1, 4) each
  xt::xtensor<float, 3> dot_weights, additive_weights;  // (2, 1, 10): d2l's attention_weights
};

inline d2l_module_run d2l_modules_example() {
  const seeds_example ex;
  d2l_module_run r;

  // [snippet d2l_modules]
  xattn::nn::dot_product_attention dot(0.5f, /*seed*/ 0);
  dot.keep_weights(true);  // d2l always keeps them; here it is a choice (one more evaluation)
  r.dot_output = dot.forward(ex.dot_queries, ex.keys, ex.values, ex.valid_lens);  // eval mode: no dropout
  r.dot_weights = dot.last_weights();

  // key_size 2, query_size 20, num_hiddens 8: W_q, W_k, w_v drawn from seed 0
  xattn::nn::additive_attention additive(2, 20, 8, 0.1f, /*seed*/ 0);
  additive.keep_weights(true);
  r.additive_output = additive.forward(ex.add_queries, ex.keys, ex.values, ex.valid_lens);
  r.additive_weights = additive.last_weights();
  // [end d2l_modules]
  return r;
}

}  // namespace dsl
