// Variant "xattn": the fused evaluator over the same shapes as the baselines, writing into the
// benchmark's own output buffer (eval_into), with the causal rule the shape table uses.
#include "common.hpp"
#include "reference.hpp"
#include "variants.hpp"

#include <xattn/xattn.hpp>
#include <xtensor/xadapt.hpp>

#include <cmath>

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
  auto Q = xattn::ref(q), K = xattn::ref(k), V = xattn::ref(v);
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  const xattn::schedule sch{.threads = threads};  // blocks chosen by the library, as for a user
  if (s.causal)
    run_timed(state, attention_flop(s), [&] {
      xattn::eval_into(softmax(mask(Q * trans(K) * scale, xattn::causal(xattn::align::bottom_right))) * V, o, sch);
    });
  else
    run_timed(state, attention_flop(s), [&] { xattn::eval_into(softmax(Q * trans(K) * scale) * V, o, sch); });
  check_against_reference(state, data, data.o.data());
}

}  // namespace

void register_xattn_variant() { register_attention_variant("xattn", run_xattn); }

}  // namespace xattn_bench
