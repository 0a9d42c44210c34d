#pragma once
// The examples quoted by docs/guide.md. tests/docs/test_guide_examples.cpp runs every one of them
// against the reference evaluator or closed forms; the regions between "// [snippet NAME]" and
// "// [end NAME]" appear verbatim in the docs (tests/docs checks that they still do).
#include <xattn/xattn.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace dsl::guide {

/// Three ways to hand in operands; q (2, 8, 16, 4), k_packed (2, 16, 2*4), v_bshd 2*16*2*4 floats.
inline xt::xtensor<float, 4> three_layouts(const xt::xtensor<float, 4>& q, const xt::xtensor<float, 3>& k_packed,
                                           const std::vector<float>& v_bshd) {
  using namespace xattn;
  // [snippet terminals]
  auto Q = ref(q);              // q: (B, Hq, S, D) = (2, 8, 16, 4), viewed in place
  auto K = heads(k_packed, 2);  // k_packed: (B, S, Hkv*D) = (2, 16, 2*4), read as 2 heads in place
  auto V = ref(v_bshd.data(), {2, 2, 16, 4}, {16 * 2 * 4, 4, 2 * 4, 1});  // raw (B, S, H, D) memory as (B, H, S, D)
  return eval(softmax(Q * trans(K) / 2.0f) * V);  // (2, 8, 16, 4), the layout of Q; query head h reads kv head h / 4
  // [end terminals]
}

/// The common words in one expression: q, k, v (B, S, D); lens (B); rel a (Sq, Skv) float bias.
template <class Tensor, class Lens, class Bias>
auto many_words(const Tensor& q, const Tensor& k, const Tensor& v, const Lens& lens, const Bias& rel,
                std::uint64_t seed) {
  using namespace xattn;
  // [snippet words]
  auto Q = ref(q), K = ref(k), V = ref(v);
  const float d = float(q.shape().back());
  auto scores = Q * trans(K) / std::sqrt(d);                  // Q Kᵀ / √d: no scale unless written
  auto shaped = softcap(scores, 30.0) + bias(rel);            // score modifiers, applied in the order written
  auto masked = mask(mask(shaped, lengths(lens)), causal());  // masks, innermost first
  auto weights = dropout(softmax(masked), 0.1f, seed);        // optional: training-mode dropout
  return eval(weights * V);                                   // nothing is computed before eval
  // [end words]
}

/// The rest of the words; q, k, v are (B, H, S, D) with H = 4 heads; keep is (S, S) bool.
template <class Tensor, class Keep>
auto more_words(const Tensor& q, const Tensor& k, const Tensor& v, const Keep& keep) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet words_more]
  auto s = score(scaled_dot{}, Q, K);               // any scoring policy: dot, scaled_dot, cosine, ... or yours
  auto a = alibi(s, alibi_op::standard_slopes(4));  // ALiBi: one slope per query head
  // any element-wise op(s, b, h, i, j), like Flex's score_mod
  auto diagonal = [](auto x, std::size_t, std::size_t, std::size_t i, std::size_t j) { return i == j ? x - 1 : x; };
  auto m = modify(a, diagonal);
  auto w = mask(mask(m, window(8, 0)), bool_mask(keep));  // sliding window; bool mask, true = attend
  // any (b, h, i, j) -> bool, like Flex's mask_mod
  auto blocks = [](std::size_t, std::size_t, std::size_t i, std::size_t j) { return j == 0 || i / 4 == j / 4; };
  auto p = mask(w, predicate(blocks));
  return eval(softmax(p) * V);
  // [end words_more]
}

/// What eval returns for each form; q, k, v are (B, H, S, D).
template <class Tensor>
auto eval_forms(const Tensor& q, const Tensor& k, const Tensor& v) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet eval_forms]
  auto e = softmax(mask(Q * trans(K), causal())) * V;
  xt::xtensor<float, 4> out = eval(e);                                    // fused pass: (B, H, Sq, Dv)
  xt::xtensor<float, 4> w = eval(softmax(mask(Q * trans(K), causal())));  // weights: (B, H, Sq, Skv)
  xt::xtensor<float, 4> s = eval(mask(Q * trans(K), causal()));           // scores after masks, -inf where excluded
  reference_result r = reference(e);                                      // double: scores, weights, output, lse
  // [end eval_forms]
  return std::make_tuple(out, w, s, r);
}

/// Attention over keys split in two shards, merged; q (B, S, D), k1/v1 and k2/v2 the shards.
template <class Tensor>
auto sharded(const Tensor& q, const Tensor& k1, const Tensor& v1, const Tensor& k2, const Tensor& v2) {
  using namespace xattn;
  auto Q = ref(q);
  // [snippet lse_merge]
  auto shard = [&](const Tensor& k, const Tensor& v) {
    auto K = ref(k), V = ref(v);
    return eval_with_lse(softmax(Q * trans(K) / 8.0f) * V);  // .output (B, Sq, Dv) and .lse (B, Sq)
  };
  auto both = merge(shard(k1, v1), shard(k2, v2));  // = attention over the keys of both shards
  // [end lse_merge]
  return both;
}

/// The attention written into a caller's buffer; q (B, Sq, D), k and v (B, Skv, ·), out (B, Sq, Dv).
template <class Tensor, class Out>
void into_buffer(const Tensor& q, const Tensor& k, const Tensor& v, Out& out) {
  using namespace xattn;
  // [snippet eval_into]
  auto Q = ref(q), K = ref(k), V = ref(v);
  eval_into(softmax(Q * trans(K) / 8.0f) * V, out);  // out: row-major, the shape eval would return
  // [end eval_into]
}

/// Operands of different element types, and the result type chosen; q float (B, S, D), kv_cache
/// double (B, S, D).
template <class QT, class KV>
auto mixed_types(const QT& q, const KV& kv_cache) {
  using namespace xattn;
  // [snippet mixed_types]
  auto Q = ref(q);                            // float queries
  auto K = ref(kv_cache), V = ref(kv_cache);  // a double key/value cache
  auto e = softmax(Q * trans(K) / 8.0f) * V;
  xt::xtensor<double, 3> out = eval(e);          // accumulated in double (an operand is double), returned in double
  xt::xtensor<float, 3> out32 = eval<float>(e);  // the same accumulation, returned as float
  // [end mixed_types]
  return std::make_pair(out, out32);
}

/// 16-bit operands: float queries over a bfloat16 KV cache (both (B, H, S, D)), float output, and a
/// bfloat16 one on request.
template <class QT, class KV>
auto sixteen_bit(const QT& q, const KV& k_cache, const KV& v_cache) {
  using namespace xattn;
  // [snippet sixteen_bit]
  // k_cache, v_cache: xt::xtensor<xattn::bfloat16, 4>, e.g. xt::cast<xattn::bfloat16>(k) (one rounding)
  auto Q = ref(q);                          // float queries
  auto K = ref(k_cache), V = ref(v_cache);  // read in place, 2 bytes per element
  auto e = softmax(Q * trans(K) / 8.0f) * V;
  xt::xtensor<float, 4> out = eval(e);     // accumulated in float, returned in float
  auto out16 = eval<xattn::bfloat16>(e);   // the same, rounded once to bfloat16
  float first = float(out16(0, 0, 0, 0));  // explicit conversion back
  // [end sixteen_bit]
  return std::make_tuple(out, out16, first);
}

/// The attention written into raw memory laid out as (B, Sq, H, Dv) -- packed heads -- by strides.
template <class Tensor>
void into_raw(const Tensor& q, const Tensor& k, const Tensor& v, float* out) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k), V = ref(v);  // (B, H, S, D) = (2, 4, 16, 8), values of 8
  // [snippet eval_into_raw]
  const std::size_t B = 2, H = 4, Sq = 16, Dv = 8;  // out: B * Sq * H * Dv floats, (B, Sq, H, Dv) row-major
  eval_into(softmax(Q * trans(K)) * V, out, {B, H, Sq, Dv}, {Sq * H * Dv, Dv, H * Dv, 1});
  // [end eval_into_raw]
}

/// What eval would do, as text.
template <class Tensor>
std::string explained(const Tensor& q, const Tensor& k, const Tensor& v) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet explain]
  const explanation x = explain(softmax(mask(Q * trans(K) / 8.0f, causal())) * V, {.threads = 2});
  std::cout << x;  // the plan and the loop nest; x.path, x.schedule.forward.threads, ... for programs
  // [end explain]
  return x.text;
}

/// One expression under an explicit schedule.
template <class Tensor>
auto scheduled(const Tensor& q, const Tensor& k, const Tensor& v) {
  using namespace xattn;
  auto Q = ref(q), K = ref(k), V = ref(v);
  auto e = softmax(mask(Q * trans(K) / 8.0f, causal())) * V;
  // [snippet schedule]
  const schedule sch{.block_q = 32, .block_k = 256, .threads = 1};  // how, not what: tiles and threads
  auto out = eval(e, sch);
  // [end schedule]
  return out;
}

// [snippet lifetime_wrong]
// WRONG: bool_mask(keep) views the local `keep`, which dies at the return: the expression dangles.
template <class QT, class KT, class VT>
auto padded_attention_dangling(QT Q, KT K, VT V, std::size_t batch, std::size_t keys, std::size_t valid) {
  xt::xtensor<bool, 3> keep = xt::zeros<bool>({batch, std::size_t(1), keys});  // (B, 1, Skv)
  xt::view(keep, xt::all(), xt::all(), xt::range(0, valid)) = true;
  return xattn::softmax(xattn::mask(Q * xattn::trans(K), xattn::bool_mask(keep))) * V;
}
// [end lifetime_wrong]

// [snippet lifetime_right]
// Right: move the tensor in (or pass a temporary): the expression then owns it.
template <class QT, class KT, class VT>
auto padded_attention(QT Q, KT K, VT V, std::size_t batch, std::size_t keys, std::size_t valid) {
  xt::xtensor<bool, 3> keep = xt::zeros<bool>({batch, std::size_t(1), keys});  // (B, 1, Skv)
  xt::view(keep, xt::all(), xt::all(), xt::range(0, valid)) = true;
  return xattn::softmax(xattn::mask(Q * xattn::trans(K), xattn::bool_mask(std::move(keep)))) * V;
}
// [end lifetime_right]

}  // namespace dsl::guide
