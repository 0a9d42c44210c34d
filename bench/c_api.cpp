// "c_api/<how>/<B>/<H>/<Sq>/<Skv>/<D>/<threads>": one attention call on the same tensors through
// the C interface (how = c: xattn_forward from libxattn_c) and through the C++ expression it
// documents (how = cpp: eval_with_lse_into, the log-sum-exp written too), so that their ratio in
// one run is the interface's cost. (1,8,1024,1024,64) is a long forward, (1,8,1,256,64) one
// decoding step (counter us_per_call). Counter gflops (4·B·H·Sq·Skv·D). "c_api_fwd_bwd/...": the
// forward and then the backward (xattn_backward; grad_into on caller memory), gflops counted as
// xattn_fwd_bwd's (3.5 × the forward's). "c_api_documents/..." and "c_api_documents_fwd_bwd/...":
// causal attention over four packed documents of equal length, which the C interface runs on its
// runtime-composed masks (documents is one of its rarer options) and C++ as
// mask(mask(s, causal()), documents(ids)): their ratio is the runtime composition's cost (gflops
// counted as for the dense rows, so the skipped blocks show as a higher rate).
#include "common.hpp"
#include "variants.hpp"

#include <xattn.h>
#include <xattn/xattn.hpp>
#include <xtensor/xadapt.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace xattn_bench {

namespace {

struct c_shape {
  std::size_t batch, heads, seq_q, seq_kv, dim;
};

void c_api(benchmark::State& state, const c_shape& s, bool through_c, int threads, bool backward, bool packed) {
  set_threads(threads);
  const std::size_t nq = s.batch * s.heads * s.seq_q * s.dim, nk = s.batch * s.heads * s.seq_kv * s.dim;
  std::vector<float> q(nq), k(nk), v(nk), out(nq), lse(s.batch * s.heads * s.seq_q), d_out(nq), dq(nq), dk(nk), dv(nk);
  fill_uniform(q, 1);
  fill_uniform(k, 2);
  fill_uniform(v, 3);
  fill_uniform(d_out, 4);
  const auto i64 = [](std::size_t x) { return std::int64_t(x); };
  const std::int64_t B = i64(s.batch), H = i64(s.heads), Sq = i64(s.seq_q), Skv = i64(s.seq_kv), D = i64(s.dim);
  xattn_tensor Q{q.data(), XATTN_F32, 4, {B, H, Sq, D}, {H * Sq * D, Sq * D, D, 1}};
  xattn_tensor K{k.data(), XATTN_F32, 4, {B, H, Skv, D}, {H * Skv * D, Skv * D, D, 1}};
  xattn_tensor V{v.data(), XATTN_F32, 4, {B, H, Skv, D}, {H * Skv * D, Skv * D, D, 1}};
  xattn_tensor O{out.data(), XATTN_F32, 4, {B, H, Sq, D}, {H * Sq * D, Sq * D, D, 1}};
  xattn_tensor L{lse.data(), XATTN_F32, 3, {B, H, Sq}, {H * Sq, Sq, 1}};
  xattn_tensor dO = O, dQ = Q, dK = K, dV = V;
  dO.data = d_out.data(), dQ.data = dq.data(), dK.data = dk.data(), dV.data = dv.data();
  xattn_attention_desc desc = xattn_attention_defaults();
  desc.threads = threads;
  std::vector<std::int64_t> ids(s.seq_kv);
  for (std::size_t j = 0; j < s.seq_kv; ++j) ids[j] = std::int64_t(4 * j / s.seq_kv);
  xattn_tensor ids_c{ids.data(), XATTN_I64, 1, {Skv}, {1}};
  if (packed) desc.causal = XATTN_CAUSAL_TOP_LEFT, desc.documents = &ids_c;
  xattn::schedule sch;
  sch.threads = threads;
  const std::array<std::size_t, 4> shape_q{s.batch, s.heads, s.seq_q, s.dim},
      shape_k{s.batch, s.heads, s.seq_kv, s.dim};
  const std::array<std::ptrdiff_t, 4> strides_q{H * Sq * D, Sq * D, D, 1}, strides_k{H * Skv * D, Skv * D, D, 1};
  const double flop = (backward ? 3.5 : 1.0) * 4.0 * double(s.batch * s.heads * s.seq_q * s.seq_kv * s.dim);
  const double seconds = run_timed(state, flop, [&] {
    if (through_c) {
      if (xattn_forward(&Q, &K, &V, &desc, &O, &L) != XATTN_OK) state.SkipWithError(xattn_last_error());
      if (backward && xattn_backward(&Q, &K, &V, &desc, &O, &L, &dO, &dQ, &dK, &dV, nullptr, nullptr) != XATTN_OK)
        state.SkipWithError(xattn_last_error());
    } else {
      using namespace xattn;
      const auto scores = ref(q.data(), shape_q, strides_q) * trans(ref(k.data(), shape_k, strides_k)) *
                          (1.0 / std::sqrt(double(s.dim)));
      const auto run = [&](const auto& e) {
        const std::array<std::size_t, 3> shape_l{s.batch, s.heads, s.seq_q};
        const std::array<std::ptrdiff_t, 3> strides_l{H * Sq, Sq, 1};
        eval_with_lse_into(e, out.data(), shape_q, strides_q, lse.data(), shape_l, strides_l, sch);
        if (backward)
          grad_into(e, raw_tensor<const float, 4>{out.data(), shape_q, strides_q},
                    raw_tensor<const float, 3>{lse.data(), shape_l, strides_l},
                    raw_tensor<const float, 4>{d_out.data(), shape_q, strides_q},
                    raw_tensor<float, 4>{dq.data(), shape_q, strides_q},
                    raw_tensor<float, 4>{dk.data(), shape_k, strides_k},
                    raw_tensor<float, 4>{dv.data(), shape_k, strides_k}, sch);
      };
      const auto V = ref(v.data(), shape_k, strides_k);
      if (packed)
        run(softmax(mask(mask(scores, causal()), documents(xt::adapt(ids, {s.seq_kv})))) * V);
      else
        run(softmax(scores) * V);
    }
  });
  state.counters["us_per_call"] = seconds * 1e6;
}

}  // namespace

void register_c_api() {
  const auto add = [](const c_shape& s, bool through_c, int threads, bool backward, bool packed = false) {
    std::string name =
        std::string(packed ? "c_api_documents" : "c_api") + (backward ? "_fwd_bwd/" : "/") + (through_c ? "c" : "cpp");
    for (std::size_t x : {s.batch, s.heads, s.seq_q, s.seq_kv, s.dim}) name += '/' + std::to_string(x);
    name += '/' + std::to_string(threads);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [=](benchmark::State& st) { c_api(st, s, through_c, threads, backward, packed); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  };
  for (const c_shape& s : {c_shape{1, 8, 1024, 1024, 64}, c_shape{1, 8, 1, 256, 64}})
    for (int threads : {1, 2})
      for (const bool through_c : {true, false}) add(s, through_c, threads, false);
  for (int threads : {1, 2})
    for (const bool through_c : {true, false}) add(c_shape{1, 8, 1024, 1024, 64}, through_c, threads, true);
  for (const bool backward : {false, true})
    for (const bool through_c : {true, false}) add(c_shape{1, 8, 1024, 1024, 64}, through_c, 1, backward, true);
}

}  // namespace xattn_bench
