// Sinks, sink tokens, rotary embeddings and sums of score products written as a user writes them
// (the forms the guide documents, each compiled as is), every result against the double reference.
#include "support/against_reference.hpp"
#include "support/random.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xadapt.hpp>

#include <cmath>
#include <cstdint>

using namespace xattn;
using testing::max_abs_diff;

TEST_CASE("modern attention: sinks, sink tokens, rope and sums as users write them") {
  testing::rng r(2026);
  const std::size_t B = 1, Hq = 4, Hkv = 2, S = 40, D = 64;
  const xt::xtensor<float, 4> q = r.tensor<float>({B, Hq, S, D}), k = r.tensor<float>({B, Hkv, S, D}),
                              v = r.tensor<float>({B, Hkv, S, D});
  const xt::xtensor<float, 4> d_out = r.tensor<float>({B, Hq, S, D});
  const auto Q = ref(q), K = ref(k), V = ref(v);

  // 1. learnable sinks
  xt::xtensor<float, 1> sink = {0.5f, -1.0f, 0.0f, 2.0f};  // (Hq)
  auto e1 = softmax(mask(Q * trans(K) / 8.0f, causal()), sinks(sink)) * V;
  auto f1 = eval_with_lse(e1);  // lse includes the sink term
  auto g1 = grad(e1, f1, d_out);
  const auto rg1 = reference_grad(make_plan(e1), xt::xtensor<double, 4>(xt::cast<double>(d_out)));
  CHECK(max_abs_diff(f1.lse, reference(e1).lse) < 1e-5);
  CHECK(max_abs_diff(g1.dsinks, xt::adapt(rg1.dsinks)) < 1e-4);  // (Hq), beside dq, dk, dv

  // 2. sink tokens through a sliding window
  auto e2 = softmax(mask(Q * trans(K) / 8.0f, window(8, 0, sink_tokens(4)))) * V;
  CHECK(max_abs_diff(eval(e2), reference(e2).output) < 1e-5);

  // 3. rotary embeddings: positions, options, a frequency table, an integer offset
  xt::xtensor<std::int64_t, 1> qpos = xt::arange<std::int64_t>(100, 100 + std::int64_t(S)), kpos = qpos;
  auto Qr = rope(Q, qpos);
  auto Kr = rope(K, kpos, {.base = 500000.0f, .dims = 64, .style = rope_style::interleaved});
  const xt::xtensor<float, 1> freqs = r.vector<float>(D / 2, 1e-3, 1.0);  // (dims / 2), dims = D
  auto Kf = rope(K, kpos, {.inv_freq = freqs});
  auto Ko = rope(K, std::int64_t{100});
  auto e3 = softmax(mask(Qr * trans(Kr) / 8.0f, causal())) * V;
  auto g3 = grad(e3, eval_with_lse(e3), d_out);  // gradients of the unrotated Q and K
  const auto rg3 = reference_grad(make_plan(e3), xt::xtensor<double, 4>(xt::cast<double>(d_out)));
  CHECK(max_abs_diff(g3.dq, rg3.dq) < 1e-4);
  CHECK(max_abs_diff(g3.dk, rg3.dk) < 1e-4);
  const auto ef = softmax(Qr * trans(Kf) / 8.0f) * V;
  CHECK(max_abs_diff(eval(ef), reference(ef).output) < 1e-5);
  // an offset is the positions start, start + 1, ...
  CHECK(max_abs_diff(eval(softmax(Qr * trans(Ko)) * V), eval(softmax(Qr * trans(rope(K, kpos))) * V)) == 0);

  // 4. a sum of score products, the second term's key head shared by every query head
  const xt::xtensor<float, 4> q1 = r.tensor<float>({B, Hq, S, 128}), k1 = r.tensor<float>({B, Hq, S, 128}),
                              q2 = r.tensor<float>({B, Hq, S, 64}), k2 = r.tensor<float>({B, 1, S, 64}),
                              v4 = r.tensor<float>({B, Hq, S, 128}), d4 = r.tensor<float>({B, Hq, S, 128});
  const auto Q1 = ref(q1), K1 = ref(k1), Q2 = ref(q2), K2 = ref(k2);
  auto s4 = Q1 * trans(K1) + rope(Q2, qpos) * trans(rope(K2, kpos));
  auto e4 = softmax(mask(s4 / std::sqrt(192.0f), causal())) * ref(v4);
  auto g4 = grad(e4, eval_with_lse(e4), d4);
  const auto rg4 = reference_grad(make_plan(e4), xt::xtensor<double, 4>(xt::cast<double>(d4)));
  CHECK(max_abs_diff(g4.dq, rg4.dq) < 1e-4);
  CHECK(max_abs_diff(g4.dk2, rg4.dk2) < 1e-4);
  CHECK(max_abs_diff(g4.dq2, rg4.dq2) < 1e-4);

  // 5. MLA decoding with absorbed weights: the latent cache C is both a key term and the values
  const xt::xtensor<float, 4> qc = r.tensor<float>({B, 16, 1, 512}), c = r.tensor<float>({B, 1, S, 512}),
                              qrope = r.tensor<float>({B, 16, 1, 64}), krope = r.tensor<float>({B, 1, S, 64});
  const auto Qc = ref(qc), C = ref(c), Qrope = ref(qrope), Krope = ref(krope);
  auto e5 = softmax(Qc * trans(C) / std::sqrt(576.0f) + Qrope * trans(Krope) / std::sqrt(576.0f)) * C;
  CHECK(max_abs_diff(eval(e5), reference(e5).output) < 1e-5);
}
