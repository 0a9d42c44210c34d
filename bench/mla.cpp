// Multi-head latent attention (DeepSeek-V2/V3) as a sum of score products.
// xattn_mla_fwd_bwd: the training form, eval_with_lse then grad of
//   softmax(mask((Q1 * trans(K1) + rope(Q2, pos) * trans(rope(K2, pos))) / sqrt(192), causal)) * V
// with nope 128 + rope 64 features, K2 one head shared by all, Dv 128; xattn_mla_plain_fwd_bwd the
// same attention with Q and K of 192 features (the peer: what the sum may cost over it).
// xattn_mla / xattn_mla_bf16: one absorbed decoding step, 128 query heads over a latent cache C of
// one head (latent 512 + rope 64), C both the first key term and the values:
//   softmax(Qc * trans(C) * c + Qrope * trans(Krope) * c) * C   (float, or bfloat16 operands).
// The head_dim field is the score's features (192, 576). FLOP: forward 2·Sq·Skv·(Dqk + Dv) per head,
// forward + backward 2·Sq·Skv·(4·Dqk + 3·Dv) (the five products of the backward); causal half.
#include "common.hpp"
#include "variants.hpp"

#include <xattn/xattn.hpp>
#include <xtensor/xtensor.hpp>

#include <cmath>

namespace xattn_bench {

namespace {

template <class T>
xt::xtensor<T, 4> filled(std::array<std::size_t, 4> shape, std::uint64_t seed) {
  xt::xtensor<float, 4> x = xt::xtensor<float, 4>::from_shape(shape);
  fill_uniform({x.data(), x.size()}, seed);
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return xt::cast<T>(x);
}

constexpr std::size_t nope = 128, rope_dims = 64, dv = 128;

/// Plain: Q and K of nope + rope features; otherwise the sum of the two terms.
template <bool Plain>
void run_training(benchmark::State& state, const attention_shape& s, int threads) {
  set_threads(threads);
  const std::size_t B = s.batch, H = s.heads, S = s.seq_q;
  const auto v = filled<float>({B, H, S, dv}, 3), d_out = filled<float>({B, H, S, dv}, 4);
  const xt::xtensor<std::int64_t, 1> pos = xt::arange<std::int64_t>(std::int64_t(S));
  const float c = 1.0f / std::sqrt(float(nope + rope_dims));
  const xattn::schedule sch{.threads = threads};
  double flop = 2.0 * double(B * H * S * S) * double(4 * (nope + rope_dims) + 3 * dv);
  if (s.causal) flop /= 2;
  const auto masked = [&](auto scores) {
    return softmax(mask(scores * c, xattn::causal(xattn::align::bottom_right))) * xattn::ref(v);
  };
  const auto measure = [&](const auto& e) {
    auto f = xattn::eval_with_lse(e, sch);
    run_timed(state, flop, [&] {
      f = xattn::eval_with_lse(e, sch);
      auto g = xattn::grad(e, f, d_out, sch);
      benchmark::DoNotOptimize(g.dq.data());
    });
  };
  if constexpr (Plain) {
    const auto q = filled<float>({B, H, S, nope + rope_dims}, 1), k = filled<float>({B, H, S, nope + rope_dims}, 2);
    measure(masked(xattn::ref(q) * trans(xattn::ref(k))));
  } else {
    const auto q1 = filled<float>({B, H, S, nope}, 1), k1 = filled<float>({B, H, S, nope}, 2),
               q2 = filled<float>({B, H, S, rope_dims}, 5), k2 = filled<float>({B, 1, S, rope_dims}, 6);
    measure(masked(xattn::ref(q1) * trans(xattn::ref(k1)) +
                   xattn::rope(xattn::ref(q2), pos) * trans(xattn::rope(xattn::ref(k2), pos))));
  }
}

template <class T>
void run_decoding(benchmark::State& state, const attention_shape& s, int threads) {
  set_threads(threads);
  constexpr std::size_t latent = 512;
  const std::size_t B = s.batch, H = s.heads, Skv = s.seq_kv;
  const auto qc = filled<T>({B, H, 1, latent}, 1), qr = filled<T>({B, H, 1, rope_dims}, 2);
  const auto cache = filled<T>({B, 1, Skv, latent}, 3), kr = filled<T>({B, 1, Skv, rope_dims}, 4);
  xt::xtensor<float, 4> out = xt::xtensor<float, 4>::from_shape({B, H, 1, latent});
  const float c = 1.0f / std::sqrt(float(latent + rope_dims));
  const xattn::schedule sch{.threads = threads};
  const auto C = xattn::ref(cache);
  const auto e = softmax(xattn::ref(qc) * trans(C) * c + xattn::ref(qr) * trans(xattn::ref(kr)) * c) * C;
  run_timed(state, 2.0 * double(B * H * Skv) * double(latent + rope_dims + latent),
            [&] { xattn::eval_into(e, out, sch); });
}

}  // namespace

void register_mla() {
  const attention_shape train{1, 16, 2048, 2048, int(nope + rope_dims), true};
  const attention_shape decode{1, 128, 1, 4096, 576, false};
  for (int threads : thread_counts) {
    benchmark::RegisterBenchmark(bench_name("xattn_mla_fwd_bwd", train, threads).c_str(),
                                 [=](benchmark::State& st) { run_training<false>(st, train, threads); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(bench_name("xattn_mla_plain_fwd_bwd", train, threads).c_str(),
                                 [=](benchmark::State& st) { run_training<true>(st, train, threads); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(bench_name("xattn_mla", decode, threads).c_str(),
                                 [=](benchmark::State& st) { run_decoding<float>(st, decode, threads); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(bench_name("xattn_mla_bf16", decode, threads).c_str(),
                                 [=](benchmark::State& st) { run_decoding<xattn::bfloat16>(st, decode, threads); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace xattn_bench
