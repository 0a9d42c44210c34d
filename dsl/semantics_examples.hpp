#pragma once
// The examples quoted by docs/semantics.md: each convention written in the DSL. tests/docs/
// test_semantics.cpp evaluates every one and checks it against closed forms; the regions between
// "// [snippet NAME]" and "// [end NAME]" appear verbatim in the docs.
#include <xattn/xattn.hpp>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace dsl::semantics {

/// Fully masked rows, both conventions; q, k, v (B, S, D), lens (B) or (B, Sq).
template <class Tensor, class Lens>
auto masked_rows_both(const Tensor& q, const Tensor& k, const Tensor& v, const Lens& lens) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet masked_rows]
  // a row of length 0 gets uniform weights (the mean of V) under d2l's fill, zero weights and output under ONNX's
  auto d2l_like = softmax(mask(Q * trans(K), lengths(lens))) * V;
  auto onnx_like = softmax(mask(Q * trans(K), lengths(lens, masked_rows::zero))) * V;
  // [end masked_rows]
  return std::make_pair(eval(d2l_like), eval(onnx_like));
}

/// Causal masks under the three alignments, as weights; q (B, Sq, D), k (B, Skv, D), offsets (B).
template <class Tensor>
auto causal_alignments(const Tensor& q, const Tensor& k, const std::vector<int>& offsets) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k);
  auto S = Q * trans(K);
  // [snippet causal_alignment]
  auto top_left = mask(S, causal());                         // key j visible to query i iff j <= i
  auto bottom_right = mask(S, causal(align::bottom_right));  // iff j <= i + Skv - Sq
  auto per_batch = mask(S, causal_offsets(offsets));         // iff j <= i + offsets[b]
  // [end causal_alignment]
  return std::make_tuple(eval(softmax(top_left)), eval(softmax(bottom_right)), eval(softmax(per_batch)));
}

/// d2l's decoder self-attention: causal through 2-D valid lengths lens[b, i] = i + 1.
template <class Tensor>
auto d2l_causal(const Tensor& q, const Tensor& k) {
  using namespace xattn;
  const std::size_t batch = q.shape()[0], steps = q.shape()[1];
  auto Q = ref(q), K = ref(k);
  // [snippet d2l_causal]
  xt::xtensor<int, 2> dec_valid_lens = xt::xtensor<int, 2>::from_shape({batch, steps});
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t i = 0; i < steps; ++i) dec_valid_lens(b, i) = int(i + 1);  // d2l: arange(1, steps + 1)
  auto weights = eval(softmax(mask(Q * trans(K), lengths(dec_valid_lens))));    // = mask(..., causal())
  // [end d2l_causal]
  return weights;
}

/// Bool masks attend where true; float masks are added. q, k (B, S, D); keep bool and add float,
/// both broadcast against the (B, Sq, Skv) scores.
template <class Tensor, class Keep, class Add>
auto mask_values(const Tensor& q, const Tensor& k, const Keep& keep, const Add& add) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k);
  // [snippet mask_values]
  auto by_bool = mask(Q * trans(K), bool_mask(keep));  // keep: true = attend (SDPA, ONNX); false keys are excluded
  auto by_float = Q * trans(K) + bias(add);            // add: float, added to the scores; -inf excludes the key
  // [end mask_values]
  return std::make_pair(eval(softmax(by_bool)), eval(softmax(by_float)));
}

/// The three ways to (not) scale; q, k (B, S, D).
template <class Tensor>
auto scales(const Tensor& q, const Tensor& k) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k);
  const std::size_t d = q.shape().back();
  // [snippet scales]
  auto unscaled = Q * trans(K);                       // no implicit 1/√d
  auto by_hand = Q * trans(K) / std::sqrt(float(d));  // d2l, SDPA's and ONNX's default: d = head size of Q and K
  auto by_policy = score(scaled_dot{}, Q, K);         // the same 1/√d from a policy
  // [end scales]
  return std::make_tuple(eval(unscaled), eval(by_hand), eval(by_policy));
}

/// Softcap, then masks; q, k, v (B, S, D).
template <class Tensor>
auto softcap_then_mask(const Tensor& q, const Tensor& k, const Tensor& v, double cap) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet softcap_order]
  auto capped = softmax(mask(softcap(Q * trans(K), cap), causal())) * V;  // c·tanh(s/c) first, then the mask
  // [end softcap_order]
  return eval(capped);
}

/// A key-padding mask with d2l's fill and a causal mask together, as scores and weights.
template <class Tensor, class Lens>
auto combined_masks(const Tensor& q, const Tensor& k, const Lens& lens) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k);
  // [snippet combined_masks]
  auto both = mask(mask(Q * trans(K), lengths(lens)), causal());
  // causal excludes (-inf) and wins wherever it hides a key; keys hidden only by lengths score -1e6
  // [end combined_masks]
  return std::make_pair(eval(both), eval(softmax(both)));
}

/// Grouped-query attention; q (B, 8, Sq, D), k and v (B, 2, Skv, D).
template <class Tensor>
auto grouped(const Tensor& q, const Tensor& k, const Tensor& v) {
  using namespace xattn;
  // [snippet gqa]
  auto Q = ref(q);              // (B, 8, Sq, D): 8 query heads
  auto K = ref(k), V = ref(v);  // (B, 2, Skv, D): 2 kv heads; query heads 0-3 read kv head 0, 4-7 kv head 1
  auto out = eval(softmax(Q * trans(K)) * V);
  // [end gqa]
  return out;
}

/// Packed documents: three sequences of 3, 5 and 4 tokens in one row of 12; q, k, v (1, 12, D).
template <class Tensor>
auto packed_documents(const Tensor& q, const Tensor& k, const Tensor& v) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet documents]
  xt::xtensor<int, 1> cu_seqlens = {0, 3, 8, 12};  // FlashAttention's offsets: documents [0,3), [3,8), [8,12)
  auto each_alone = softmax(mask(Q * trans(K), documents_from_offsets(cu_seqlens))) * V;
  auto causal_each = softmax(mask(mask(Q * trans(K), documents_from_offsets(cu_seqlens)), causal())) * V;
  // = documents(ids) with ids {0,0,0, 1,1,1,1,1, 2,2,2,2}
  // [end documents]
  return std::make_pair(eval(each_alone), eval(causal_each));
}

/// Training-mode dropout on the normalised weights; q, k, v (B, S, D).
template <class Tensor>
auto with_dropout(const Tensor& q, const Tensor& k, const Tensor& v, std::uint64_t seed) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet dropout]
  auto train = dropout(softmax(mask(Q * trans(K), causal())), 0.1f, seed) * V;
  // weight w kept with probability 0.9 as w / 0.9, else 0; decided by Philox from (seed, b, h, i, j)
  // [end dropout]
  return eval(train);
}

/// Attention sinks and sink tokens; q (B, H, S, D), k and v (B, H, Skv, D), sink (H).
template <class Tensor, class Sinks>
auto with_sinks(const Tensor& q, const Tensor& k, const Tensor& v, const Sinks& sink) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet sinks]
  // gpt-oss: weight_j = e^{s_j} / (e^{sink[h]} + sum_k e^{s_k}); a row that sees no key outputs 0
  auto learned = softmax(mask(Q * trans(K), window(3, 0)), sinks(sink)) * V;
  // StreamingLLM: keys 0 and 1 stay visible to every query through the sliding window
  auto streaming = softmax(mask(Q * trans(K), window(3, 0, sink_tokens(2)))) * V;
  // [end sinks]
  return std::make_pair(eval(learned), eval(streaming));
}

/// A sum of score products (multi-head latent attention): q1, k1 (B, H, S, D1), q2 (B, H, S, D2),
/// k2 (B, 1, S, D2): one rope key head shared by every query head; v (B, H, S, Dv).
template <class Tensor, class Positions>
auto sum_of_products(const Tensor& q1, const Tensor& k1, const Tensor& q2, const Tensor& k2, const Tensor& v,
                     const Positions& pos) {
  using namespace xattn;
  // [snippet sums]
  // DeepSeek's MLA: per query head h, [q1, rope(q2)] · [k1, rope(k2)] over D1 + D2 features, one softmax
  auto s = ref(q1) * trans(ref(k1)) + rope(ref(q2), pos) * trans(rope(ref(k2), pos));
  auto mla = softmax(mask(s / std::sqrt(double(q1.shape()[3] + q2.shape()[3])), causal())) * ref(v);
  // [end sums]
  return eval(mla);
}

}  // namespace dsl::semantics
