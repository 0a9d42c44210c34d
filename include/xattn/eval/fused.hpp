#pragma once
// The fused evaluator: bind the policies, build the keys of the score path once (projected,
// packed), then run every (batch, query head, query block[, key chunk]) task -- in parallel when
// OpenMP is on, each thread through its own contiguous range and then stealing (task_ranges),
// because causal tasks are uneven. How many threads, which blocks, packed or in place, split or
// not: all decided beforehand by resolve_schedule.
#include "../kernel/merge.hpp"
#include "fused_worker.hpp"
#include "paths/select.hpp"
#include "resolve.hpp"
#include "task_ranges.hpp"

#include <algorithm>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace xattn {

namespace detail {

/// Binds the plan's policies, builds the path's keys, and calls task(worker, t) for every
/// t < rs.tasks, on rs.threads threads.
template <class Acc, class Plan, class Task>
void run_tasks(const Plan& p, const problem& pr, const resolved_schedule& rs, pass_kind kind, Task&& task) {
  using Path = path_t<Acc, std::decay_t<decltype(p.base)>>;
  const auto ops = bind_all(p.ops, pr);
  const auto masks = bind_all(p.masks, pr);
  typename Path::keys keys(p.base, pr, rs);
  const bool fold = kind != pass_kind::scores && folds_log2e(ops, masks);
  using worker_t = fused_worker<Acc, Path, Plan, std::decay_t<decltype(ops)>, std::decay_t<decltype(masks)>>;
#ifdef _OPENMP
  task_ranges queue{rs.tasks, std::size_t(rs.threads)};
#pragma omp parallel num_threads(rs.threads) if (rs.threads > 1)
  {
    keys.build(p.base, pr);  // orphaned omp fors: their barrier ends before any task reads the keys
    worker_t wk(p, pr, ops, masks, keys, rs, fold);
    while (const auto t = queue.next(std::size_t(omp_get_thread_num()))) task(wk, *t);
  }
#else
  keys.build(p.base, pr);
  worker_t wk(p, pr, ops, masks, keys, rs, fold);
  for (std::size_t t = 0; t < rs.tasks; ++t) task(wk, t);
#endif
}

/// Task t -> (batch, query head, first query row, key chunk): the query heads of a GQA group
/// fastest, then chunks, so consecutive tasks read the same key panels. With grouped rows
/// (rs.group_rows), h is the group's first query head and the task takes all of its heads.
struct task_coords {
  std::size_t b, h, i0, chunk;
};
inline task_coords coords(std::size_t t, const problem& pr, const resolved_schedule& rs) {
  if (rs.group_rows > 0) {
    const std::size_t c = t % rs.key_chunks, bk = t / rs.key_chunks;
    return {bk / pr.kv_heads, bk % pr.kv_heads * rs.group_rows, 0, c};
  }
  const std::size_t kv_heads = std::max<std::size_t>(pr.kv_heads, 1),
                    group = std::max<std::size_t>(pr.q_heads / kv_heads, 1);
  const std::size_t g = t % group, c = t / group % rs.key_chunks, rest = t / group / rs.key_chunks;
  const std::size_t qb = rest % rs.q_blocks, bk = rest / rs.q_blocks;
  return {bk / kv_heads, bk % kv_heads * group + g, qb * rs.block_q, c};
}

}  // namespace detail

/// softmax(...) * V into out (B, Hq, Sq, Dv) and, when lse has data, each row's log-sum-exp.
template <class Acc, class Plan, class Out>
void run_fused(const Plan& p, const problem& pr, const resolved_schedule& rs, const strided_view<Out>& out,
               const strided_view<Acc, 3>& lse = {}) {
  if (rs.key_chunks == 1) {
    detail::run_tasks<Acc>(p, pr, rs, pass_kind::attention, [&](auto& wk, std::size_t t) {
      const auto c = detail::coords(t, pr, rs);
      if (rs.group_rows > 0)
        wk.run_group(c.b, c.h / rs.group_rows, rs.group_rows, 0, pr.kv_len, out, lse);
      else
        wk.run(c.b, c.h, c.i0, 0, pr.kv_len, out, lse);
    });
    return;
  }
  // Decoding split: each chunk's output and log-sum-exp go to scratch, (B, H, Sq, chunks, Dv) and
  // (B, H, Sq, chunks), merged below in chunk order.
  const std::size_t chunks = rs.key_chunks;
  const layout<4> rows_at = layout<4>::row_major({pr.batch, pr.q_heads, pr.q_len, chunks});
  std::vector<Acc> part_out(rows_at.size() * pr.v_dim), part_lse(rows_at.size());
  detail::run_tasks<Acc>(p, pr, rs, pass_kind::attention, [&](auto& wk, std::size_t t) {
    const auto c = detail::coords(t, pr, rs);
    const strided_view<Acc> o{
        part_out.data() + rows_at(0, 0, 0, c.chunk) * std::ptrdiff_t(pr.v_dim),
        {{pr.batch, pr.q_heads, pr.q_len, pr.v_dim},
         {rows_at.stride[0] * std::ptrdiff_t(pr.v_dim), rows_at.stride[1] * std::ptrdiff_t(pr.v_dim),
          rows_at.stride[2] * std::ptrdiff_t(pr.v_dim), 1}}};
    const strided_view<Acc, 3> l{
        part_lse.data() + c.chunk,
        {{pr.batch, pr.q_heads, pr.q_len}, {rows_at.stride[0], rows_at.stride[1], rows_at.stride[2]}}};
    const std::size_t k0 = c.chunk * rs.chunk_keys, k1 = std::min(pr.kv_len, (c.chunk + 1) * rs.chunk_keys);
    if (rs.group_rows > 0)
      wk.run_group(c.b, c.h / rs.group_rows, rs.group_rows, k0, k1, o, l);
    else
      wk.run(c.b, c.h, c.i0, k0, k1, o, l);
  });
  for (std::size_t b = 0; b < pr.batch; ++b)
    for (std::size_t h = 0; h < pr.q_heads; ++h)
      for (std::size_t i = 0; i < pr.q_len; ++i) {
        const std::ptrdiff_t row = rows_at(b, h, i, 0);
        const Acc merged = kernel::merge_row<Acc>(
            chunks, [&](std::size_t c) { return part_lse[std::size_t(row) + c]; },
            [&](std::size_t c) { return part_out.data() + (std::size_t(row) + c) * pr.v_dim; }, pr.v_dim,
            out.row(b, h, i), out.inner_stride());
        if (lse.data) lse(b, h, i) = merged;
      }
}

/// The weights (kind weights) or the scores (kind scores) of a plan into out (B, Hq, Sq, Skv).
template <class Acc, class Plan, class Out>
void run_materialised(const Plan& p, const problem& pr, const resolved_schedule& rs, pass_kind kind,
                      const strided_view<Out>& out) {
  detail::run_tasks<Acc>(p, pr, rs, kind, [&](auto& wk, std::size_t t) {
    const auto c = detail::coords(t, pr, rs);
    if (kind == pass_kind::weights)
      wk.run_weights(c.b, c.h, c.i0, out);
    else
      wk.run_scores(c.b, c.h, c.i0, out);
  });
}

}  // namespace xattn
