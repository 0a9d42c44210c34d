#pragma once
// The fused evaluator: project keys once if the policy needs it, then run every
// (batch, query head, query block) task -- in parallel when OpenMP is on, each thread through its
// own contiguous range and then stealing (task_ranges), because causal tasks are uneven.
#include "choose_schedule.hpp"
#include "fused_worker.hpp"
#include "key_panels.hpp"
#include "task_ranges.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>
#include "resolve.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace xattn {

/// Decoding (a few query rows per key head): score keys where they lie instead of packing them.
template <score_path Path, class Plan>
bool reads_keys_in_place(const Plan& p, const problem& pr) {
  if constexpr (Path == score_path::dot_identity)
    return pr.q_len * (pr.q_heads / pr.kv_heads) <= 16 && p.base.k.view.rows_contiguous();
  else
    return Path == score_path::dot_features && pr.q_len * (pr.q_heads / pr.kv_heads) <= 16;
}

/// Decoding leaves too few (batch, head, query block) tasks to feed the cores, so long key ranges
/// are split into chunks whose results merge by log-sum-exp. The split depends only on the
/// shape, never on the thread count, so results stay bitwise identical across thread counts.
inline std::size_t key_chunks(const problem& pr, std::size_t bk) {
  constexpr std::size_t min_keys_per_chunk = 1024;
  if (pr.q_len > 16 || pr.kv_len < 2 * min_keys_per_chunk) return 1;
  return std::min<std::size_t>(8, pr.kv_len / std::max(min_keys_per_chunk, bk));
}

/// out row = sum_c exp(lse_c - m) out_c / sum_c exp(lse_c - m), chunks in order.
template <class T>
void merge_chunks(const std::vector<T>& part_out, const std::vector<T>& part_lse, std::size_t chunks,
                  const problem& pr, const strided4<T>& out, const lse_target<T>& lse) {
  const std::size_t dv = pr.v_dim;
  for (std::size_t b = 0; b < pr.batch; ++b)
    for (std::size_t h = 0; h < pr.q_heads; ++h)
      for (std::size_t i = 0; i < pr.q_len; ++i) {
        const std::size_t row = (b * pr.q_heads + h) * pr.q_len + i;
        const T* l = part_lse.data() + row * chunks;
        const T m = *std::max_element(l, l + chunks);
        T* o = out.mutable_row(b, h, i);
        for (std::size_t d = 0; d < dv; ++d) o[std::ptrdiff_t(d) * out.strides[3]] = 0;
        T z = 0;
        if (m != -std::numeric_limits<T>::infinity())
          for (std::size_t c = 0; c < chunks; ++c) {
            const T wgt = std::exp(l[c] - m);
            z += wgt;
            const T* oc = part_out.data() + (row * chunks + c) * dv;
            for (std::size_t d = 0; d < dv; ++d) o[std::ptrdiff_t(d) * out.strides[3]] += wgt * oc[d];
          }
        for (std::size_t d = 0; d < dv && z > 0; ++d) o[std::ptrdiff_t(d) * out.strides[3]] /= z;
        if (lse.data) lse.at(b, h, i) = z > 0 ? m + std::log(z) : -std::numeric_limits<T>::infinity();
      }
}

template <class T, class Plan>
void run_fused(const Plan& p, const problem& pr, const schedule& requested, strided4<T> out, lse_target<T> lse = {}) {
  constexpr score_path path = path_of<decltype(p.base)>();
  const auto ops = bind_all(p.ops, pr);
  const auto masks = bind_all(p.masks, pr);
  const std::size_t n = feature_width<path>(p.base, pr);
#ifdef _OPENMP
  // Waking a team costs more than a tiny problem takes (about 2^22 flop ~ 40 us here).
  const double work = 2.0 * double(pr.batch * pr.q_heads * pr.q_len) * double(pr.kv_len) * double(n + pr.v_dim);
  const int threads = work < double(1 << 22) ? 1 : requested.threads > 0 ? requested.threads : omp_get_max_threads();
#else
  const int threads = 1;
#endif
  const schedule sch = choose_schedule(requested, pr, n, sizeof(T), threads);
  const auto kf = project_keys<path, T>(p.base, pr, n, threads);
  const std::size_t bk = simd::padded<T>(sch.block_k);
  constexpr bool dot_path = path == score_path::dot_identity || path == score_path::dot_features;
  const bool packed = dot_path && !reads_keys_in_place<path>(p, pr);
  key_panels<T> panels = packed ? make_key_panels<T>(pr, n, bk) : key_panels<T>{};
  auto pack_panels = [&] {  // inside the parallel region below: one team wake-up per evaluation
    if constexpr (path == score_path::dot_identity) {
      const auto& kv = p.base.k.view;
      if (packed) pack_key_panels(panels, pr, kv.strides[3], [&](std::size_t b, std::size_t h, std::size_t j) { return kv.row(b, h, j); });
    } else if constexpr (path == score_path::dot_features) {
      if (packed) pack_key_panels(panels, pr, 1, [&](std::size_t b, std::size_t h, std::size_t j) { return kf.row(b, h, j); });
    }
  };

  const std::size_t qblocks = (pr.q_len + sch.block_q - 1) / sch.block_q;
  using worker_t = fused_worker<T, path, Plan, std::decay_t<decltype(ops)>, std::decay_t<decltype(masks)>>;
  const std::size_t chunks = key_chunks(pr, bk);
  const std::size_t chunk = ((pr.kv_len + chunks - 1) / chunks + bk - 1) / bk * bk;  // whole key blocks
  std::vector<T> part_out, part_lse;
  strided4<T> part_view{};
  lse_target<T> part_lse_at{};
  if (chunks > 1) {  // partial results per key chunk, (B, H, Sq, chunks, Dv) and (B, H, Sq, chunks)
    part_out.resize(pr.batch * pr.q_heads * pr.q_len * chunks * pr.v_dim);
    part_lse.resize(pr.batch * pr.q_heads * pr.q_len * chunks);
    const auto C = std::ptrdiff_t(chunks), dv = std::ptrdiff_t(pr.v_dim), sq = std::ptrdiff_t(pr.q_len);
    part_view = {part_out.data(), {pr.batch, pr.q_heads, pr.q_len, pr.v_dim},
                 {std::ptrdiff_t(pr.q_heads) * sq * C * dv, sq * C * dv, C * dv, 1}};
    part_lse_at = {part_lse.data(), std::ptrdiff_t(pr.q_heads) * sq * C, sq * C, C};
  }
  const std::ptrdiff_t tasks = std::ptrdiff_t(pr.batch * pr.q_heads * qblocks * chunks);
  auto task = [&](worker_t& wk, std::ptrdiff_t t) {
    const std::size_t c = std::size_t(t) % chunks, rest = std::size_t(t) / chunks;
    const std::size_t qb = rest % qblocks, bh = rest / qblocks;
    const std::size_t b = bh / pr.q_heads, h = bh % pr.q_heads;
    if (chunks == 1) return wk.run(b, h, qb * sch.block_q);
    auto o = part_view;
    o.data += c * pr.v_dim;
    auto l = part_lse_at;
    l.data += c;
    wk.run(b, h, qb * sch.block_q, c * chunk, std::min(pr.kv_len, (c + 1) * chunk), o, l);
  };
#ifdef _OPENMP
  task_ranges queue{std::size_t(tasks), std::size_t(threads)};
#pragma omp parallel num_threads(threads) if (threads > 1 && tasks > 1)
  {
    pack_panels();  // an orphaned omp for: its barrier ends before any task reads a panel
    worker_t wk(p, pr, ops, masks, kf, panels, n, sch, out, lse);
    while (const auto t = queue.next(std::size_t(omp_get_thread_num()))) task(wk, std::ptrdiff_t(*t));
  }
#else
  pack_panels();
  worker_t wk(p, pr, ops, masks, kf, panels, n, sch, out, lse);
  for (std::ptrdiff_t t = 0; t < tasks; ++t) task(wk, t);
#endif
  if (chunks > 1) merge_chunks(part_out, part_lse, chunks, pr, out, lse);
}

}  // namespace xattn
