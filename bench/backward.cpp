// The backward pass: xattn_bwd (grad() given the forward's output and log-sum-exp),
// xattn_fwd_bwd (eval_with_lse then grad), blas_unfused_bwd (OpenBLAS with the weights P
// materialised, as autograd saves them: dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − rowsum(P∘dP)),
// dQ = c·dS·K, dK = c·dSᵀ·Q; P is computed once before timing) and blas_unfused_fwd_bwd (that
// forward, P = softmax(c·Q·Kᵀ) kept and O = P·V, then that backward), over the backward shapes.
// gflops counts FlashAttention-2's 2.5 x 4·B·H·Sq·Skv·D for a backward (causal: half), 3.5 x for
// forward + backward -- the same count for every row, so ratios of gflops are ratios of time.
// blas_products_bwd is that backward's matrix products alone, with S = c·Q·Kᵀ recomputed first as
// a FlashAttention backward does: the five products of exactly that count by the machine's tuned
// BLAS, no elementwise work -- what the fused backward's products could reach done as large GEMMs.
// Counters: busy (xattn rows) and bwd_per_fwd (xattn_fwd_bwd: the backward's time over the
// forward's within the same iterations).
#include "common.hpp"
#include "reference.hpp"
#include "row_softmax.hpp"
#include "variants.hpp"
#include "xattn_timed.hpp"

#include <cblas.h>

#include <xattn/xattn.hpp>
#include <xtensor/xadapt.hpp>

#include <chrono>
#include <cmath>
#include <ctime>

namespace xattn_bench {

namespace {

inline constexpr std::array<attention_shape, 4> backward_shapes{{
    {1, 8, 2048, 2048, 64, false},
    {1, 8, 2048, 2048, 128, false},
    {1, 8, 4096, 4096, 64, false},
    {1, 8, 2048, 2048, 64, true},
}};

/// Forward: eval_with_lse timed too; Sinks: softmax(..., sinks(t)) (rows xattn_sinks_fwd_bwd);
/// Rope: rope(Q, positions) * trans(rope(K, positions)) (rows xattn_rope_fwd_bwd); E: the element
/// type of Q, K, V and dO (bfloat16: rows xattn_bf16_bwd, xattn_bf16_fwd_bwd, the same values
/// rounded once, as a bf16 training step holds them).
template <bool Forward, bool Sinks = false, bool Rope = false, class E = float>
void run_backward(benchmark::State& state, const attention_shape& s, int threads) {
  set_threads(threads);
  attention_data data(s);
  aligned_buffer d_out(elements_q(s));
  fill_uniform(d_out.span(), 4);
  auto adapt = [&](aligned_buffer& b, int seq) {
    const std::array<std::size_t, 4> shape{std::size_t(s.batch), std::size_t(s.heads), std::size_t(seq),
                                           std::size_t(s.head_dim)};
    return xt::adapt(b.span().data(), b.span().size(), xt::no_ownership(), shape);
  };
  const auto as_e = [](const auto& x) {
    if constexpr (std::is_same_v<E, float>)
      return x;
    else
      return xt::xtensor<E, 4>(xt::cast<E>(x));
  };
  auto q = as_e(adapt(data.q, s.seq_q)), k = as_e(adapt(data.k, s.seq_kv)), v = as_e(adapt(data.v, s.seq_kv));
  auto dout = as_e(adapt(d_out, s.seq_q));
  auto V = xattn::ref(v);
  const xt::xtensor<std::int64_t, 1> qpos = xt::arange<std::int64_t>(s.seq_kv - s.seq_q, s.seq_kv),
                                     kpos = xt::arange<std::int64_t>(s.seq_kv);
  const auto [Q, K] = [&] {
    if constexpr (Rope)
      return std::pair{xattn::rope(xattn::ref(q), qpos), xattn::rope(xattn::ref(k), kpos)};
    else
      return std::pair{xattn::ref(q), xattn::ref(k)};
  }();
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  const xattn::schedule sch{.threads = threads};
  auto measure = [&](const auto& e) {
    auto f = xattn::eval_with_lse(e, sch);
    const double flop = attention_flop(s) * (Forward ? 3.5 : 2.5);
    const std::clock_t cpu = std::clock();
    std::chrono::steady_clock::duration forward{}, backward{};
    const double per_iteration = run_timed(state, flop, [&] {
      const auto t0 = std::chrono::steady_clock::now();
      if constexpr (Forward) f = xattn::eval_with_lse(e, sch);
      const auto t1 = std::chrono::steady_clock::now();
      auto g = xattn::grad(e, f, dout, sch);
      benchmark::DoNotOptimize(g.dq.data());
      backward += std::chrono::steady_clock::now() - t1;
      forward += t1 - t0;
    });
    // Issue 17 states its backward target also as a time ratio (backward at most 3.0x the forward):
    // both halves timed in the same iterations, so the host's drift between rows does not enter.
    if (Forward && forward.count() > 0)
      state.counters["bwd_per_fwd"] = std::chrono::duration<double>(backward) / std::chrono::duration<double>(forward);
    // The process's CPU time over threads x wall time: below 1 where a thread waited (serial
    // passes, the last tasks). The host's slowing of a thread does not lower it, so it tells the
    // code's scaling from the machine's.
    if (per_iteration > 0)
      state.counters["busy"] =
          double(std::clock() - cpu) / CLOCKS_PER_SEC / (double(threads) * per_iteration * double(state.iterations()));
  };
  const xt::xtensor<float, 1> t = bench_sinks(s.heads);
  const auto weights = [&](const auto& masked) {
    if constexpr (Sinks)
      return softmax(masked, xattn::sinks(t));
    else
      return softmax(masked);
  };
  if (s.causal)
    measure(weights(mask(Q * trans(K) * scale, xattn::causal(xattn::align::bottom_right))) * V);
  else
    measure(weights(Q * trans(K) * scale) * V);
}

/// One head of the unfused backward; p (Sq x Skv, rows score_stride(Skv) apart) holds the weights,
/// dp is scratch of that size. ProductsOnly: S recomputed into dp first, and no softmax gradient.
template <bool ProductsOnly>
void unfused_head_backward(const attention_shape& s, const float* q, const float* k, const float* v, const float* d_out,
                           const float* p, float* dp, float* dq, float* dk, float* dv) {
  const int sq = s.seq_q, skv = s.seq_kv, d = s.head_dim, ld = int(score_stride(skv));
  const float c = 1.0f / std::sqrt(float(d));
  if constexpr (ProductsOnly)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sq, skv, d, c, q, d, k, d, 0.0f, dp, ld);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, skv, d, sq, 1.0f, p, ld, d_out, d, 0.0f, dv, d);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sq, skv, d, 1.0f, d_out, d, v, d, 0.0f, dp, ld);
  if constexpr (!ProductsOnly)
    for (int i = 0; i < sq; ++i) {
      const float* pr = p + std::size_t(i) * ld;
      float* g = dp + std::size_t(i) * ld;
      float delta = 0;
      for (int j = 0; j < skv; ++j) delta += pr[j] * g[j];
      for (int j = 0; j < skv; ++j) g[j] = pr[j] * (g[j] - delta);
    }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, sq, d, skv, c, dp, ld, k, d, 0.0f, dq, d);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, skv, d, sq, c, dp, ld, q, d, 0.0f, dk, d);
}

/// One head of the unfused forward as autograd runs it: P = softmax(c·Q·Kᵀ) materialised and kept
/// (normalised, for the backward; rows score_stride(Skv) apart), O = P·V.
void unfused_head_forward(const attention_shape& s, const float* q, const float* k, const float* v, float* p,
                          float* o) {
  const int sq = s.seq_q, skv = s.seq_kv, d = s.head_dim, ld = int(score_stride(skv));
  const float c = 1.0f / std::sqrt(float(d));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sq, skv, d, c, q, d, k, d, 0.0f, p, ld);
  for (int i = 0; i < sq; ++i) {
    float* row = p + std::size_t(i) * ld;
    const float inv = softmax_row_unnormalised(row, causal_visible_keys(s, i), skv);
    for (int j = 0; j < skv; ++j) row[j] *= inv;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, sq, d, skv, 1.0f, p, ld, v, d, 0.0f, o, d);
}

/// The unfused backward (Forward: the unfused forward too, timed with it; else P is computed once
/// before timing; ProductsOnly: blas_products_bwd).
template <bool Forward, bool ProductsOnly = false>
void blas_unfused_bwd(benchmark::State& state, const attention_shape& s, int threads) {
  set_threads(threads);
  openblas_set_num_threads(1);  // heads in parallel by OpenMP, as blas_unfused does
  attention_data data(s);
  aligned_buffer d_out(elements_q(s)), dq(elements_q(s)), dk(elements_kv(s)), dv(elements_kv(s));
  fill_uniform(d_out.span(), 4);
  const int heads = s.batch * s.heads;
  const std::size_t plane = std::size_t(s.seq_q) * score_stride(s.seq_kv);
  aligned_buffer p(plane * std::size_t(heads)), scratch(plane * std::size_t(threads));
  auto forward = [&](int bh) {
    const int b = bh / s.heads, h = bh % s.heads;
    const std::size_t oq = data.head_offset(b, h, s.seq_q), okv = data.head_offset(b, h, s.seq_kv);
    unfused_head_forward(s, data.q.data() + oq, data.k.data() + okv, data.v.data() + okv,
                         p.data() + plane * std::size_t(bh), data.o.data() + oq);
  };
  if constexpr (!Forward)
    for (int bh = 0; bh < heads; ++bh) forward(bh);  // the forward's weights, saved (not timed)
  run_timed(state, attention_flop(s) * (Forward ? 3.5 : 2.5), [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int bh = 0; bh < heads; ++bh) {
      if constexpr (Forward) forward(bh);
      const int b = bh / s.heads, h = bh % s.heads;
      const std::size_t oq = data.head_offset(b, h, s.seq_q), okv = data.head_offset(b, h, s.seq_kv);
      unfused_head_backward<ProductsOnly>(s, data.q.data() + oq, data.k.data() + okv, data.v.data() + okv,
                                          d_out.data() + oq, p.data() + plane * std::size_t(bh),
                                          scratch.data() + plane * std::size_t(omp_get_thread_num()), dq.data() + oq,
                                          dk.data() + okv, dv.data() + okv);
    }
  });
  if constexpr (Forward) check_against_reference(state, data, data.o.data());
}

}  // namespace

void register_backward() {
  for (const attention_shape& s : modern_shapes)
    for (int threads : thread_counts) {
      benchmark::RegisterBenchmark(bench_name("xattn_sinks_fwd_bwd", s, threads).c_str(),
                                   [s, threads](benchmark::State& st) { run_backward<true, true>(st, s, threads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(
          bench_name("xattn_rope_fwd_bwd", s, threads).c_str(),
          [s, threads](benchmark::State& st) { run_backward<true, false, true>(st, s, threads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  for (const attention_shape& s : backward_shapes)
    for (int threads : thread_counts) {
      benchmark::RegisterBenchmark(bench_name("xattn_bwd", s, threads).c_str(),
                                   [s, threads](benchmark::State& st) { run_backward<false>(st, s, threads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(bench_name("xattn_fwd_bwd", s, threads).c_str(),
                                   [s, threads](benchmark::State& st) { run_backward<true>(st, s, threads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(
          bench_name("xattn_bf16_bwd", s, threads).c_str(),
          [s, threads](benchmark::State& st) { run_backward<false, false, false, xattn::bfloat16>(st, s, threads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(
          bench_name("xattn_bf16_fwd_bwd", s, threads).c_str(),
          [s, threads](benchmark::State& st) { run_backward<true, false, false, xattn::bfloat16>(st, s, threads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(bench_name("blas_unfused_bwd", s, threads).c_str(),
                                   [s, threads](benchmark::State& st) { blas_unfused_bwd<false>(st, s, threads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(bench_name("blas_unfused_fwd_bwd", s, threads).c_str(),
                                   [s, threads](benchmark::State& st) { blas_unfused_bwd<true>(st, s, threads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      if (!s.causal)  // the products are full either way; the count would halve
        benchmark::RegisterBenchmark(
            bench_name("blas_products_bwd", s, threads).c_str(),
            [s, threads](benchmark::State& st) { blas_unfused_bwd<false, true>(st, s, threads); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    }
}

}  // namespace xattn_bench
