#pragma once
// The fused evaluator: bind the policies, build the keys of the score path once (projected,
// packed), then run every task of the forward schedule -- in parallel when OpenMP is on, each
// thread through its own contiguous range and then stealing (task_ranges), because causal tasks
// are uneven. How many threads, which blocks, packed or in place, split or not: all decided
// beforehand by resolve_schedule.
#include "../../kernel/merge.hpp"
#include "../paths/select.hpp"
#include "../plan/resolve.hpp"
#include "../tiling/task_ranges.hpp"
#include "../tiling/tasks.hpp"
#include "fused_worker.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace xattn {

namespace detail {

/// Binds the plan's policies, builds the path's keys, and calls task(worker, t) for every
/// t < fs.tasks, on fs.threads threads.
template <class Acc, class Plan, class Task>
void run_tasks(const Plan& p, const problem& pr, const forward_schedule& fs, Task&& task) {
  using Path = path_t<Acc, std::decay_t<decltype(p.base)>>;
  const auto ops = bind_all(p.ops, pr);
  const auto masks = bind_all(p.masks, pr);
  typename Path::keys keys(p.base, pr, fs);
  const bool fold = fs.kind != pass_kind::scores && folds_log2e(ops, masks);
  using worker_t = fused_worker<Acc, Path, Plan, std::decay_t<decltype(ops)>, std::decay_t<decltype(masks)>>;
#ifdef _OPENMP
  task_ranges queue{fs.tasks, std::size_t(fs.threads)};
#pragma omp parallel num_threads(fs.threads) if (fs.threads > 1)
  {
    keys.build(p.base, pr);  // orphaned omp fors: their barrier ends before any task reads the keys
    worker_t wk(p, pr, ops, masks, keys, fs, fold);
    while (const auto t = queue.next(std::size_t(omp_get_thread_num()))) task(wk, *t);
  }
#else
  keys.build(p.base, pr);
  worker_t wk(p, pr, ops, masks, keys, fs, fold);
  for (std::size_t t = 0; t < fs.tasks; ++t) task(wk, t);
#endif
}

}  // namespace detail

/// softmax(...) * V into out (B, Hq, Sq, Dv) and, when lse has data, each row's log-sum-exp.
template <class Acc, class Plan, class Out>
void run_fused(const Plan& p, const problem& pr, const forward_schedule& fs, const strided_view<Out>& out,
               const strided_view<Acc, 3>& lse = {}) {
  if (fs.key_chunks == 1) {
    // prefetch_next: a thread mostly runs t + 1 after t; a kv head's tasks are group · q_blocks in a row
    const std::size_t group = std::max<std::size_t>(pr.q_heads / std::max<std::size_t>(pr.kv_heads, 1), 1),
                      per_head = group * fs.q_blocks;
    detail::run_tasks<Acc>(p, pr, fs, [&](auto& wk, std::size_t t) {
      const forward_task c = forward_task_at(t, pr, fs);
      if (fs.prefetch_next && t + 1 < fs.tasks) {
        if (t % per_head == 0 && t + per_head < fs.tasks) {
          const forward_task n = forward_task_at(t + per_head, pr, fs);
          wk.prefetch_head(n.b, n.h);
        }
        const forward_task n = forward_task_at(t + 1, pr, fs);
        wk.prefetch_task(n.b, n.h, n.i0, out);
      }
      if (fs.group_rows > 0)
        wk.run_group(c.b, c.h / fs.group_rows, fs.group_rows, 0, pr.kv_len, out, lse);
      else
        wk.run(c.b, c.h, c.i0, 0, pr.kv_len, out, lse);
    });
    return;
  }
  // Decoding split: each chunk's output and log-sum-exp go to scratch, (B, H, Sq, chunks, Dv) and
  // (B, H, Sq, chunks), merged below in chunk order.
  const std::size_t chunks = fs.key_chunks;
  const layout<5> part_at = layout<5>::row_major({pr.batch, pr.q_heads, pr.q_len, chunks, pr.v_dim});
  const layout<4> lse_at = layout<4>::row_major({pr.batch, pr.q_heads, pr.q_len, chunks});
  std::vector<Acc> part_out(part_at.size()), part_lse(lse_at.size());
  detail::run_tasks<Acc>(p, pr, fs, [&](auto& wk, std::size_t t) {
    const forward_task c = forward_task_at(t, pr, fs);
    const strided_view<Acc> o{part_out.data() + part_at(0, 0, 0, c.chunk, 0),
                              {{pr.batch, pr.q_heads, pr.q_len, pr.v_dim},
                               {part_at.stride[0], part_at.stride[1], part_at.stride[2], part_at.stride[4]}}};
    const strided_view<Acc, 3> l{
        part_lse.data() + lse_at(0, 0, 0, c.chunk),
        {{pr.batch, pr.q_heads, pr.q_len}, {lse_at.stride[0], lse_at.stride[1], lse_at.stride[2]}}};
    const std::size_t k0 = c.chunk * fs.chunk_keys, k1 = std::min(pr.kv_len, (c.chunk + 1) * fs.chunk_keys);
    if (fs.group_rows > 0)
      wk.run_group(c.b, c.h / fs.group_rows, fs.group_rows, k0, k1, o, l);
    else
      wk.run(c.b, c.h, c.i0, k0, k1, o, l);
  });
  for (std::size_t b = 0; b < pr.batch; ++b)
    for (std::size_t h = 0; h < pr.q_heads; ++h)
      for (std::size_t i = 0; i < pr.q_len; ++i) {
        const Acc merged = kernel::merge_row<Acc>(
            chunks, [&](std::size_t c) { return part_lse[std::size_t(lse_at(b, h, i, c))]; },
            [&](std::size_t c) { return part_out.data() + part_at(b, h, i, c, 0); }, pr.v_dim, out.row(b, h, i),
            out.inner_stride());
        if (lse.data) lse(b, h, i) = merged;
      }
}

/// The weights (kind weights) or the scores (kind scores) of a plan into out (B, Hq, Sq, Skv).
template <class Acc, class Plan, class Out>
void run_materialised(const Plan& p, const problem& pr, const forward_schedule& fs, const strided_view<Out>& out) {
  detail::run_tasks<Acc>(p, pr, fs, [&](auto& wk, std::size_t t) {
    const forward_task c = forward_task_at(t, pr, fs);
    if (fs.kind == pass_kind::weights)
      wk.run_weights(c.b, c.h, c.i0, out);
    else
      wk.run_scores(c.b, c.h, c.i0, out);
  });
}

/// Beyond this a float log-sum-exp cannot resolve a probability to 1e-4 (its ulp is 1.2e-4): rows
/// whose |lse| is larger take their exact statistics from run_row_stats.
inline constexpr double large_lse = 1024;

/// Each row's exact (m, ln l) (fused_worker::run_row_stats) into stats, (B, Hq, Sq) row-major, for
/// the query blocks where needed(b, h, i0, rows) holds; fs is a scores pass's schedule
/// (backward_schedule::rescan).
template <class Acc, class Plan, class Needed>
void run_row_stats(const Plan& p, const problem& pr, const forward_schedule& fs, std::pair<Acc, Acc>* stats,
                   Needed&& needed) {
  const layout<3> rows_at = layout<3>::row_major({pr.batch, pr.q_heads, pr.q_len});
  detail::run_tasks<Acc>(p, pr, fs, [&](auto& wk, std::size_t t) {
    const forward_task c = forward_task_at(t, pr, fs);
    if (needed(c.b, c.h, c.i0, std::min(fs.block_q, pr.q_len - c.i0)))
      wk.run_row_stats(c.b, c.h, c.i0, stats + rows_at(c.b, c.h, c.i0));
  });
}

}  // namespace xattn
