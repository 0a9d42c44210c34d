// Baseline "xtensor_eager": the d2l DotProductAttention recipe written in plain xtensor + xtensor-blas,
//   scores = bmm(Q, Kᵀ) / sqrt(d);  weights = masked_softmax(scores);  out = bmm(weights, V)
// with one materialised tensor per step, as the eager PyTorch original produces. Threads: only the
// BLAS calls use them (OpenBLAS pool); xtensor's element-wise steps run on one thread, as xtensor does
// without XTENSOR_USE_OPENMP/TBB (not enabled: it would change every translation unit linked here).
#include "common.hpp"
#include "reference.hpp"
#include "variants.hpp"

#include <xtensor-blas/xblas.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <array>
#include <cmath>

namespace xattn_bench {
namespace {

using shape4 = std::array<std::size_t, 4>;
using shape2 = std::array<std::size_t, 2>;

auto adapt4(float* p, shape4 shape) {
  return xt::adapt(p, shape[0] * shape[1] * shape[2] * shape[3], xt::no_ownership(), shape);
}

// bmm over the (B, H) batch: out[b, h] = a[b, h] · op(bt[b, h]), written straight into out's storage.
template <class A, class Bt>
void batched_gemm(const A& a, const Bt& bt, xt::xtensor<float, 4>& out, bool transpose_b) {
  auto const& sh = out.shape();
  for (std::size_t b = 0; b < sh[0]; ++b)
    for (std::size_t h = 0; h < sh[1]; ++h) {
      auto dst = xt::adapt(&out(b, h, 0, 0), sh[2] * sh[3], xt::no_ownership(), shape2{sh[2], sh[3]});
      xt::blas::gemm(xt::view(a, b, h), xt::view(bt, b, h), dst, false, transpose_b);
    }
}

xt::xtensor<float, 4> eager_attention(const attention_shape& s, attention_data& in) {
  std::size_t const B = s.batch, H = s.heads, sq = s.seq_q, skv = s.seq_kv, d = s.head_dim;
  auto q = adapt4(in.q.data(), {B, H, sq, d});
  auto k = adapt4(in.k.data(), {B, H, skv, d});
  auto v = adapt4(in.v.data(), {B, H, skv, d});

  xt::xtensor<float, 4> scores(shape4{B, H, sq, skv});
  batched_gemm(q, k, scores, true);
  xt::xtensor<float, 4> scaled = scores / std::sqrt(float(d));

  // d2l masked_softmax: sequence_mask sets masked scores to -1e6 in place (the causal decoder passes
  // per-row valid lengths). xt::where with a broadcast mask is wrong in xtensor 0.24.3, hence views.
  if (s.causal)
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t i = 0; i < sq; ++i)
          xt::view(scaled, b, h, i, xt::range(std::size_t(causal_visible_keys(s, std::ptrdiff_t(i))), skv)) = -1e6f;

  // nn.functional.softmax(dim=-1), max-subtracted like PyTorch's.
  auto const keep = xt::keep_dims | xt::evaluation_strategy::immediate;
  xt::xtensor<float, 4> weights = xt::exp(scaled - xt::amax(scaled, {3}, keep));
  weights /= xt::sum(weights, {3}, keep);

  xt::xtensor<float, 4> out(shape4{B, H, sq, d});
  batched_gemm(weights, v, out, false);
  return out;
}

void xtensor_eager(benchmark::State& state, const attention_shape& s, int threads) {
  set_threads(threads);
  attention_data data(s);
  xt::xtensor<float, 4> out;
  run_timed(state, attention_flop(s), [&] { out = eager_attention(s, data); });
  check_against_reference(state, data, out.data());
}

// Every step materialises a B·H·Sq·Skv tensor (3 live at once: 411 MiB at S = 2048, 1.5 GiB at 4096)
// and runs at ~10 GFLOP/s (~3.5 s per call at S = 4096): shapes up to 8 heads of 4096² are run.
bool small_enough(const attention_shape& s) {
  return double(s.batch) * s.heads * s.seq_q * s.seq_kv <= 8.0 * 4096 * 4096;
}

}  // namespace

void register_xtensor_eager() { register_attention_variant("xtensor_eager", xtensor_eager, small_enough); }

}  // namespace xattn_bench
