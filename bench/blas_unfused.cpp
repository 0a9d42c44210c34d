// Baseline "blas_unfused": per head, S = Q·Kᵀ·scale materialised by sgemm, row softmax, O = P·V by sgemm.
// This is the strong conventional CPU recipe (what oneDNN's unfused graph or a hand-written C++ layer does).
// "blas_products": its two sgemms alone (no softmax, so no reference check): what the machine's own
// BLAS does on the products a fused pass computes, the ceiling it is judged beside on short sequences.
#include "common.hpp"
#include "reference.hpp"
#include "row_softmax.hpp"
#include "variants.hpp"

#include <cblas.h>

#include <cmath>
#include <vector>

namespace xattn_bench {
namespace {

struct head_scratch {
  explicit head_scratch(const attention_shape& s)
      : scores(std::size_t(s.seq_q) * score_stride(s.seq_kv)), inv_sum(std::size_t(s.seq_q)) {}
  aligned_buffer scores;
  aligned_buffer inv_sum;
};

template <bool ProductsOnly>
void attend_head(const attention_shape& s, const float* q, const float* k, const float* v, float* o,
                 head_scratch& scratch) {
  int const sq = s.seq_q, skv = s.seq_kv, d = s.head_dim;
  int const ld = int(score_stride(skv));
  float const scale = 1.0f / std::sqrt(float(d));
  float* scores = scratch.scores.data();
  float* inv_sum = scratch.inv_sum.data();

  // Decode (one query row) is matrix-vector work: gemv avoids sgemm packing all of K and V for M = 1.
  if (sq == 1)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, skv, d, scale, k, d, q, 1, 0.0f, scores, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sq, skv, d, scale, q, d, k, d, 0.0f, scores, ld);

  if constexpr (!ProductsOnly)
    for (int i = 0; i < sq; ++i)
      inv_sum[i] = softmax_row_unnormalised(scores + std::size_t(i) * ld, causal_visible_keys(s, i), skv);

  if (sq == 1)
    cblas_sgemv(CblasRowMajor, CblasTrans, skv, d, 1.0f, v, d, scores, 1, 0.0f, o, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, sq, d, skv, 1.0f, scores, ld, v, d, 0.0f, o, d);

  if constexpr (!ProductsOnly)
    for (int i = 0; i < sq; ++i)
      for (int c = 0; c < d; ++c) o[std::size_t(i) * d + c] *= inv_sum[i];
}

template <bool ProductsOnly = false>
void blas_unfused(benchmark::State& state, const attention_shape& s, int threads) {
  set_threads(threads);
  // Parallelise over heads with OpenMP and keep OpenBLAS single-threaded: with both pools active,
  // idle OpenMP workers spin on the cores OpenBLAS's own threads need (2-4x slowdowns measured), and
  // one sgemm per core over independent heads needs no synchronisation inside the head.
  openblas_set_num_threads(1);

  attention_data data(s);
  std::vector<head_scratch> scratch;
  scratch.reserve(std::size_t(threads));
  for (int t = 0; t < threads; ++t) scratch.emplace_back(s);

  int const heads = s.batch * s.heads;
  run_timed(state, attention_flop(s), [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int bh = 0; bh < heads; ++bh) {
      int const b = bh / s.heads, h = bh % s.heads;
      attend_head<ProductsOnly>(
          s, data.q.data() + data.head_offset(b, h, s.seq_q), data.k.data() + data.head_offset(b, h, s.seq_kv),
          data.v.data() + data.head_offset(b, h, s.seq_kv), data.o.data() + data.head_offset(b, h, s.seq_q),
          scratch[std::size_t(omp_get_thread_num())]);
    }
  });
  if constexpr (!ProductsOnly) check_against_reference(state, data, data.o.data());
}

}  // namespace

void register_blas_unfused() {
  register_attention_variant("blas_unfused", blas_unfused<>);
  const auto dense = [](const attention_shape& s) { return s.seq_q > 1 && !s.causal; };
  register_attention_variant("blas_unfused", blas_unfused<>, dense, xattn_only_shapes);
  register_attention_variant("blas_products", blas_unfused<true>, dense);
  register_attention_variant("blas_products", blas_unfused<true>, dense, xattn_only_shapes);
}

}  // namespace xattn_bench
