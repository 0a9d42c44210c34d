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

}  // namespace

void register_xattn_variant() {
  register_attention_variant("xattn", run_xattn);
  register_attention_variant("xattn", run_xattn, {}, xattn_only_shapes);
  register_attention_variant("xattn_sinks", run_xattn_sinks, {}, modern_shapes);
}

}  // namespace xattn_bench
