#pragma once
// The expressions docs/design.md explains: causal self-attention (forward and backward), d2l's
// additive attention with valid lengths, one grouped-query decoding step against a bfloat16 KV
// cache, and an encoder batch of short sequences. tests/eval/entry/test_trace.cpp runs each with
// the schedule below, checks that what ran is exactly what explain named, and that explain prints
// for the machine below what the docs quote (tests/data/explain/).
#include <xattn/xattn.hpp>

#include <cmath>

namespace xattn::examples {

/// The schedule the explanations are printed for: two threads, the rest chosen.
inline const schedule two_threads{.threads = 2};

/// The machine they are printed for: 1 MiB of L2 per core (a Zen 4, or an Ice Lake server core).
inline const machine docs_machine{.l2_bytes = std::size_t(1) << 20, .max_threads = 2, .openmp = true};

// [snippet explain_causal]
/// Causal self-attention (the docs print it for 8 heads of 2048 x 64).
template <class T>
auto causal_attention(const T& q, const T& k, const T& v) {
  auto Q = ref(q), K = ref(k), V = ref(v);
  return softmax(mask(Q * trans(K) / 8.0f, causal())) * V;
}
// explain(causal_attention(q, k, v), two_threads, docs_machine, with_backward)
// [end explain_causal]

// [snippet explain_additive]
/// d2l's additive attention with valid lengths (queries of 64, keys of 32, 64 hidden units).
template <class T, class Lens>
auto additive_attention(const additive& a, const T& q, const T& k, const T& v, const Lens& lens) {
  return softmax(mask(score(a, ref(q), ref(k)), lengths(lens))) * ref(v);
}
// explain(additive_attention(a, q, k, v, lens), two_threads, docs_machine)
// [end explain_additive]

// [snippet explain_decode]
/// One decoding step: 32 query heads of 128 against a bfloat16 KV cache of 8 heads.
template <class Q, class Cache>
auto decode_step(const Q& q, const Cache& k_cache, const Cache& v_cache) {
  auto K = ref(k_cache), V = ref(v_cache);
  return softmax(ref(q) * trans(K) / std::sqrt(128.0f)) * V;
}
// explain(decode_step(q, k_cache, v_cache), two_threads, docs_machine)
// [end explain_decode]

// [snippet explain_encoder]
/// An encoder batch: 16 sequences of 128 tokens, 8 heads of 64, no mask.
template <class T>
auto encoder_attention(const T& q, const T& k, const T& v) {
  return softmax(ref(q) * trans(ref(k)) / 8.0f) * ref(v);
}
// explain(encoder_attention(q, k, v), two_threads, docs_machine)
// [end explain_encoder]

}  // namespace xattn::examples
