// Variant "xattn": the fused evaluator over the same shapes as the baselines, writing into the
// benchmark's own output buffer (eval_into), with the causal rule the shape table uses.
#include "common.hpp"
#include "reference.hpp"
#include "variants.hpp"
#include "xattn_timed.hpp"

#include <xattn/xattn.hpp>
#include <xtensor/xadapt.hpp>

namespace xattn_bench {

namespace {

auto adapt(aligned_buffer& b, const attention_shape& s, int seq) {
  const std::array<std::size_t, 4> shape{std::size_t(s.batch), std::size_t(s.heads), std::size_t(seq),
                                         std::size_t(s.head_dim)};
  return xt::adapt(b.span().data(), b.span().size(), xt::no_ownership(), shape);
}

void run_xattn(benchmark::State& state, const attention_shape& s, int threads) {
  set_threads(threads);
  attention_data data(s);
  auto q = adapt(data.q, s, s.seq_q), k = adapt(data.k, s, s.seq_kv), v = adapt(data.v, s, s.seq_kv),
       o = adapt(data.o, s, s.seq_q);
  time_xattn(state, s, q, k, v, o, threads);
  check_against_reference(state, data, data.o.data());
}

/// xattn_sinks: the same attention with one learned sink per head (softmax(..., sinks(t))).
void run_xattn_sinks(benchmark::State& state, const attention_shape& s, int threads) {
  set_threads(threads);
  attention_data data(s);
  auto q = adapt(data.q, s, s.seq_q), k = adapt(data.k, s, s.seq_kv), v = adapt(data.v, s, s.seq_kv),
       o = adapt(data.o, s, s.seq_q);
  const xt::xtensor<float, 1> t = bench_sinks(s.heads);
  time_xattn(state, s, q, k, v, o, threads, xattn::sinks(t));
}

/// xattn_rope: the same attention over rotary embeddings of Q and K (positions 0..S-1, LLaMA's
/// half rotation of every feature), applied as the path loads queries and packs keys.
void run_xattn_rope(benchmark::State& state, const attention_shape& s, int threads) {
  set_threads(threads);
  attention_data data(s);
  auto q = adapt(data.q, s, s.seq_q), k = adapt(data.k, s, s.seq_kv), v = adapt(data.v, s, s.seq_kv),
       o = adapt(data.o, s, s.seq_q);
  const xt::xtensor<std::int64_t, 1> qpos = xt::arange<std::int64_t>(s.seq_kv - s.seq_q, s.seq_kv),
                                     kpos = xt::arange<std::int64_t>(s.seq_kv);
  auto Q = xattn::rope(xattn::ref(q), qpos), K = xattn::rope(xattn::ref(k), kpos);
  auto V = xattn::ref(v);
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  const xattn::schedule sch{.threads = threads};
  if (s.causal)
    run_timed(state, attention_flop(s), [&] {
      xattn::eval_into(softmax(mask(Q * trans(K) * scale, xattn::causal(xattn::align::bottom_right))) * V, o, sch);
    });
  else
    run_timed(state, attention_flop(s), [&] { xattn::eval_into(softmax(Q * trans(K) * scale) * V, o, sch); });
}

}  // namespace

void register_xattn_variant() {
  register_attention_variant("xattn", run_xattn);
  register_attention_variant("xattn", run_xattn, {}, xattn_only_shapes);
  register_attention_variant("xattn_sinks", run_xattn_sinks, {}, modern_shapes);
  register_attention_variant("xattn_rope", run_xattn_rope, {}, modern_shapes);
}

}  // namespace xattn_bench
