#pragma once
// equinox.nn.MultiheadAttention as an equinox user calls it:
//   mha = eqx.nn.MultiheadAttention(num_heads=4, query_size=32, use_output_bias=True,
//                                   dropout_p=0.1, key=jax.random.PRNGKey(0))
//   y = mha(x, x, x, mask=causal)                    # training: dropout with the given key
//   y = mha(x, x, x, mask=causal, inference=True)    # no dropout
// Here: self-attention over 12 tokens of size 32 under a causal (Sq, Skv) mask, broadcast to
// all heads as equinox broadcasts a 2-D mask; the per-head weights are kept for a heatmap.
#include <xattn/nn/nn.hpp>

#include <xtensor/xtensor.hpp>

#include <cmath>

namespace dsl {

struct equinox_mha_run {
  xt::xtensor<float, 2> train_output, inference_output;  // (12, 32)
  xt::xtensor<float, 3> weights;                         // (4, 12, 12), before dropout
};

inline equinox_mha_run equinox_mha_example() {
  constexpr std::size_t tokens = 12, size = 32;
  // [snippet equinox_mha]
  xattn::nn::multihead_attention mha(
      {.num_heads = 4, .query_size = size, .use_output_bias = true, .dropout_p = 0.1f, .seed = 0});
  // tokens with smooth position features, so heads have something to prefer
  xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({tokens, size});
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t c = 0; c < size; ++c) x(t, c) = 3 * std::sin(0.4f * float(t) * float(c % 8 + 1) + float(c));
  xt::xtensor<bool, 2> causal = xt::xtensor<bool, 2>::from_shape({tokens, tokens});
  for (std::size_t i = 0; i < tokens; ++i)
    for (std::size_t j = 0; j < tokens; ++j) causal(i, j) = j <= i;

  equinox_mha_run r;
  r.train_output = mha(x, x, x, causal, {.key = 0});
  r.inference_output = mha(x, x, x, causal, {.inference = true});
  r.weights = mha.weights(x, x, causal);
  // [end equinox_mha]
  return r;
}

}  // namespace dsl
