#pragma once
// xattn::nn: attention modules as thin, named compositions of DSL expressions.
//   d2l:     dot_product_attention, additive_attention (forward, last_weights)
//   equinox: multihead_attention (+ kv_heads for grouped-query attention)
// Link xattn::nn (BLAS for the projections).
#include "additive_attention.hpp"
#include "dot_product_attention.hpp"
#include "multihead_attention.hpp"
