#pragma once
// The fused evaluator: project keys once if the policy needs it, then run every
// (batch, query head, query block) task -- in parallel when OpenMP is on, pulled dynamically
// because causal tasks are uneven.
#include "fused_worker.hpp"
#include "key_panels.hpp"
#include "resolve.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace xattn {

template <class T, class Plan>
void run_fused(const Plan& p, const problem& pr, const schedule& sch, strided4<T> out, lse_target<T> lse = {}) {
  if (sch.block_q == 0 || sch.block_k == 0)
    detail::fail("schedule: block_q and block_k must be > 0, got (", sch.block_q, ", ", sch.block_k, ")");
  constexpr score_path path = path_of<decltype(p.base)>();
  const auto ops = bind_all(p.ops, pr);
  const auto masks = bind_all(p.masks, pr);
  const std::size_t n = feature_width<path>(p.base, pr);
#ifdef _OPENMP
  const int threads = sch.threads > 0 ? sch.threads : omp_get_max_threads();
#else
  const int threads = 1;
#endif
  const auto kf = project_keys<path, T>(p.base, pr, n, threads);
  const std::size_t bk = simd::padded<T>(sch.block_k);
  key_panels<T> panels;
  if constexpr (path == score_path::dot_identity) {
    const auto& kv = p.base.k.view;
    panels = pack_key_panels<T>(pr, n, bk, kv.strides[3], [&](std::size_t b, std::size_t h, std::size_t j) { return kv.row(b, h, j); }, threads);
  } else if constexpr (path == score_path::dot_features) {
    panels = pack_key_panels<T>(pr, n, bk, 1, [&](std::size_t b, std::size_t h, std::size_t j) { return kf.row(b, h, j); }, threads);
  }

  const std::size_t qblocks = (pr.q_len + sch.block_q - 1) / sch.block_q;
  const std::ptrdiff_t tasks = std::ptrdiff_t(pr.batch * pr.q_heads * qblocks);
  using worker_t = fused_worker<T, path, Plan, std::decay_t<decltype(ops)>, std::decay_t<decltype(masks)>>;
  auto task = [&](worker_t& wk, std::ptrdiff_t t) {
    const std::size_t qb = std::size_t(t) % qblocks, bh = std::size_t(t) / qblocks;
    wk.run(bh / pr.q_heads, bh % pr.q_heads, qb * sch.block_q);
  };
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1 && tasks > 1)
  {
    worker_t wk(p, pr, ops, masks, kf, panels, n, sch, out, lse);
#pragma omp for schedule(dynamic, 1)
    for (std::ptrdiff_t t = 0; t < tasks; ++t) task(wk, t);
  }
#else
  worker_t wk(p, pr, ops, masks, kf, panels, n, sch, out, lse);
  for (std::ptrdiff_t t = 0; t < tasks; ++t) task(wk, t);
#endif
}

}  // namespace xattn
