// Variants "xattn_bf16" and "xattn_f16": the fused evaluator on 16-bit copies of the same Q, K, V
// (fp32 output), over the shape table and the xattn-only shapes; the reference check reads the
// 16-bit values widened back, so it checks the kernel, not the rounding of the inputs.
// "xattn_gqa/<B>/<Hq>/<Hkv>/<Sq>/<Skv>/<D>/<threads>" (and _bf16_gqa, _f16_gqa): grouped-query
// decoding, with counters gflops and gbytes_per_s (K and V bytes in their storage type).
#include "common.hpp"
#include "reference.hpp"
#include "variants.hpp"
#include "xattn_timed.hpp"

#include <xattn/xattn.hpp>
#include <xtensor/xadapt.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace xattn_bench {

namespace {

template <class E>
std::vector<E> rounded_copy(aligned_buffer& b) {
  std::vector<E> out(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) {
    out[i] = E(b.data()[i]);
    b.data()[i] = float(out[i]);  // the reference sees what the kernel reads
  }
  return out;
}

template <class E>
auto adapt(std::vector<E>& x, std::size_t b, std::size_t h, std::size_t s, std::size_t d) {
  return xt::adapt(x.data(), x.size(), xt::no_ownership(), std::array<std::size_t, 4>{b, h, s, d});
}

template <class E>
void run_16bit(benchmark::State& state, const attention_shape& s, int threads) {
  set_threads(threads);
  attention_data data(s);
  auto q16 = rounded_copy<E>(data.q), k16 = rounded_copy<E>(data.k), v16 = rounded_copy<E>(data.v);
  const std::size_t B = std::size_t(s.batch), H = std::size_t(s.heads), D = std::size_t(s.head_dim);
  auto q = adapt(q16, B, H, std::size_t(s.seq_q), D), k = adapt(k16, B, H, std::size_t(s.seq_kv), D),
       v = adapt(v16, B, H, std::size_t(s.seq_kv), D);
  auto o = xt::adapt(data.o.data(), data.o.size(), xt::no_ownership(),
                     std::array<std::size_t, 4>{B, H, std::size_t(s.seq_q), D});
  time_xattn(state, s, q, k, v, o, threads);
  // bf16 values on vdpbf16ps round the probabilities to bf16 (2^-9 relative), which moves an
  // output by up to 2^-9 · max|V| (docs/numerics.md)
  double max_v = 0;
  for (float x : data.v.span()) max_v = std::max(max_v, double(std::abs(x)));
  check_against_reference(state, data, data.o.data(),
                          1e-4 + (xattn::takes_value_pairs_v<float, E> ? 0x1p-9 * max_v : 0));
}

struct gqa_shape {
  std::size_t batch, q_heads, kv_heads, seq_q, seq_kv, head_dim;
};
constexpr gqa_shape gqa{1, 32, 8, 1, 8192, 128};

template <class E>
void run_gqa(benchmark::State& state, int threads) {
  set_threads(threads);
  const auto& g = gqa;
  aligned_buffer qf(g.batch * g.q_heads * g.seq_q * g.head_dim), kf(g.batch * g.kv_heads * g.seq_kv * g.head_dim),
      vf(kf.size());
  fill_uniform(qf.span(), 1);
  fill_uniform(kf.span(), 2);
  fill_uniform(vf.span(), 3);
  auto q16 = rounded_copy<E>(qf), k16 = rounded_copy<E>(kf), v16 = rounded_copy<E>(vf);
  auto q = adapt(q16, g.batch, g.q_heads, g.seq_q, g.head_dim),
       k = adapt(k16, g.batch, g.kv_heads, g.seq_kv, g.head_dim),
       v = adapt(v16, g.batch, g.kv_heads, g.seq_kv, g.head_dim);
  auto Q = xattn::ref(q), K = xattn::ref(k), V = xattn::ref(v);
  const auto e = softmax(Q * trans(K) * (1.0f / std::sqrt(float(g.head_dim)))) * V;
  xt::xtensor<float, 4> o = xt::zeros<float>({g.batch, g.q_heads, g.seq_q, g.head_dim});
  const xattn::schedule sch{.threads = threads};
  const double flop = 4.0 * double(g.batch * g.q_heads * g.seq_q * g.seq_kv * g.head_dim);
  const double seconds = run_timed(state, flop, [&] { xattn::eval_into(e, o, sch); });
  state.counters["gbytes_per_s"] = 2.0 * double(kf.size() * sizeof(E)) / seconds / 1e9;
  const auto want = xattn::reference(e).output;  // double, on the same 16-bit values
  double worst = 0;
  for (std::size_t i = 0; i < o.size(); ++i) worst = std::max(worst, std::abs(double(o.data()[i]) - want.data()[i]));
  if (!(worst < 1e-5)) state.SkipWithError(("output differs from reference by " + std::to_string(worst)).c_str());
}

template <class E>
void register_gqa(const std::string& variant) {
  for (int threads : thread_counts) {
    std::string name = variant;
    for (std::size_t x : {gqa.batch, gqa.q_heads, gqa.kv_heads, gqa.seq_q, gqa.seq_kv, gqa.head_dim})
      name += '/' + std::to_string(x);
    benchmark::RegisterBenchmark((name + '/' + std::to_string(threads)).c_str(),
                                 [threads](benchmark::State& st) { run_gqa<E>(st, threads); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

void register_sixteen_bit() {
  register_attention_variant("xattn_bf16", run_16bit<xattn::bfloat16>);
  register_attention_variant("xattn_bf16", run_16bit<xattn::bfloat16>, {}, xattn_only_shapes);
  register_attention_variant("xattn_f16", run_16bit<xattn::float16>);
  register_attention_variant("xattn_f16", run_16bit<xattn::float16>, {}, xattn_only_shapes);
  register_gqa<float>("xattn_gqa");
  register_gqa<xattn::bfloat16>("xattn_bf16_gqa");
  register_gqa<xattn::float16>("xattn_f16_gqa");
}

}  // namespace xattn_bench
