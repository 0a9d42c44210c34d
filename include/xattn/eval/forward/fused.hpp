#pragma once
// The fused evaluator: bind the policies, then run the forward program's steps -- the keys of the
// score path built once (projected, packed), every task of the forward schedule (in parallel when
// OpenMP is on, each thread through its own contiguous range and then stealing (task_ranges),
// because causal tasks are uneven), a decoding split's chunks merged. How many threads, which
// blocks, packed or in place, split or not: all decided beforehand by resolve_schedule; which
// steps, in which order: forward_program (plan/program.hpp).
#include "../../kernel/merge.hpp"
#include "../paths/select.hpp"
#include "../plan/resolve.hpp"
#include "../tiling/task_ranges.hpp"
#include "../tiling/tasks.hpp"
#include "fused_worker.hpp"
#include "selected.hpp"
#include "turned_queries.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace xattn {

namespace detail {

inline std::size_t thread_index() {
#ifdef _OPENMP
  return std::size_t(omp_get_thread_num());
#else
  return 0;
#endif
}

/// Whether the score path of Plan prepares its keys before the tasks (forward_program's fact).
template <class Acc, class Plan>
inline constexpr bool prepares_keys_v =
    !path_t<Acc, std::decay_t<decltype(std::declval<const Plan&>().base)>>::key_work.empty();

/// Runs prog's top-level steps on fs.threads threads: the score path's keys (prepare_keys), the
/// tasks (every thread's worker calls task(worker, t, first, last) for its tasks t, [first, last)
/// being the task's steps), and the driver's own steps (other(kind) on every thread, after the
/// tasks: merge_chunks).
template <class Acc, class Plan, class Task, class Other>
void run_program(const Plan& p, const problem& pr, const forward_schedule& fs, const program& prog, Task&& task,
                 Other&& other) {
  using Path = path_t<Acc, std::decay_t<decltype(p.base)>>;
  const auto ops = bind_all(p.ops, pr);
  const auto masks = bind_all(p.masks, pr);
  typename Path::keys keys(p.base, pr, fs);
  const bool fold = fs.kind != pass_kind::scores && folds_log2e(ops, masks);
  using worker_t = fused_worker<Acc, Path, Plan, std::decay_t<decltype(ops)>, std::decay_t<decltype(masks)>>;
#ifdef _OPENMP
  task_ranges queue{fs.tasks, std::size_t(fs.threads)};
#pragma omp parallel num_threads(fs.threads) if (fs.threads > 1)
#endif
  {
    for (std::size_t at = 0; at < prog.size(); ++at) switch (prog[at].kind) {
        case step::prepare_keys:
          keys.build(p.base, pr);  // orphaned omp fors: their barrier ends before any task reads the keys
          break;
        case step::tasks: {
          const std::size_t body = prog.body_end(at);
          worker_t wk(p, pr, ops, masks, keys, fs, fold);
#ifdef _OPENMP
          while (const auto t = queue.next(std::size_t(omp_get_thread_num()))) task(wk, *t, at + 1, body);
#pragma omp barrier
#else
          for (std::size_t t = 0; t < fs.tasks; ++t) task(wk, t, at + 1, body);
#endif
          at = body - 1;
          break;
        }
        default:
          other(prog[at].kind);
          break;
      }
  }
}

/// softmax(...) * V into out (B, Hq, Sq, Dv) and, when lse has data, each row's log-sum-exp, by
/// the steps of prog (forward_program of fs); when key_mass has data, (B, Hkv, Skv), the softmax
/// weight each key received summed over the queries and the query heads of its key head.
template <class Acc, class Plan, class Out>
void run_fused_pass(const Plan& p, const problem& pr, const forward_schedule& fs, const program& prog,
                    const strided_view<Out>& out, const strided_view<Acc, 3>& lse,
                    const strided_view<Acc, 3>& key_mass) {
  // prefetch_next: a thread mostly runs t + 1 after t; a kv head's tasks are group · q_blocks in a row
  const std::size_t group = std::max<std::size_t>(pr.q_heads / std::max<std::size_t>(pr.kv_heads, 1), 1),
                    per_head = group * fs.q_blocks;
  // A decoding split: each chunk's output and log-sum-exp go to scratch, (B, H, Sq, chunks, Dv) and
  // (B, H, Sq, chunks), merged in chunk order by the merge_chunks step.
  const std::size_t chunks = fs.key_chunks;
  const bool split = chunks > 1;
  const layout<5> part_at = layout<5>::row_major({pr.batch, pr.q_heads, pr.q_len, split ? chunks : 0, pr.v_dim});
  const layout<4> lse_at = layout<4>::row_major({pr.batch, pr.q_heads, pr.q_len, split ? chunks : 0});
  std::vector<Acc> part_out(part_at.size()), part_lse(lse_at.size());
  const std::size_t rows = pr.batch * pr.q_heads * pr.q_len;
  // The key-mass tap: finished rows' weights summed per key head in each thread's own buffer; in a
  // split, each chunk's weights (relative to the chunk's log-sum-exp) kept per row until the merge
  // knows each chunk's share of the row.
  const bool tap = key_mass.data != nullptr;
  const layout<3> mass_at = layout<3>::row_major({pr.batch, pr.kv_heads, tap && !split ? pr.kv_len : 0});
  std::vector<Acc> thread_mass(std::size_t(fs.threads) * mass_at.size());
  const layout<4> chunk_w_at = layout<4>::row_major({pr.batch, pr.q_heads, pr.q_len, tap && split ? pr.kv_len : 0});
  const auto chunk_w = kernel::make_aligned_array<Acc>(chunk_w_at.size());  // every element written by its task
  std::vector<Acc> row_lse(tap && split ? rows : 0);
  const auto add_mass = [&](std::size_t b, std::size_t h, std::size_t, std::size_t k0, std::size_t n, const Acc* w) {
    Acc* to = thread_mass.data() + detail::thread_index() * mass_at.size() + mass_at(b, h / group, k0);
    for (std::size_t j = 0; j < n; ++j) to[j] += w[j];
  };
  const auto keep_chunk = [&](std::size_t b, std::size_t h, std::size_t i, std::size_t k0, std::size_t n,
                              const Acc* w) { std::copy(w, w + n, chunk_w.get() + chunk_w_at(b, h, i, k0)); };
  detail::run_program<Acc>(
      p, pr, fs, prog,
      [&](auto& wk, std::size_t t, std::size_t first, std::size_t last) {
        const forward_task c = forward_task_at(t, pr, fs);
        if (tap) wk.tap_key_mass(split ? typename std::decay_t<decltype(wk)>::mass_sink(keep_chunk) : add_mass);
        const auto [m, n] = wk.task_rows(c, fs.group_rows);
        if (!split)
          return wk.run_task(prog, first, last, c.b, m, n, 0, pr.kv_len, out, lse, [&] {
            if (t + 1 >= fs.tasks) return;
            if (t % per_head == 0 && t + per_head < fs.tasks) {
              const forward_task h = forward_task_at(t + per_head, pr, fs);
              wk.prefetch_head(h.b, h.h);
            }
            const forward_task next = forward_task_at(t + 1, pr, fs);
            wk.prefetch_task(next.b, next.h, next.i0, out);
          });
        const strided_view<Acc> o{part_out.data() + part_at(0, 0, 0, c.chunk, 0),
                                  {{pr.batch, pr.q_heads, pr.q_len, pr.v_dim},
                                   {part_at.stride[0], part_at.stride[1], part_at.stride[2], part_at.stride[4]}}};
        const strided_view<Acc, 3> l{
            part_lse.data() + lse_at(0, 0, 0, c.chunk),
            {{pr.batch, pr.q_heads, pr.q_len}, {lse_at.stride[0], lse_at.stride[1], lse_at.stride[2]}}};
        const std::size_t k0 = c.chunk * fs.chunk_keys, k1 = std::min(pr.kv_len, (c.chunk + 1) * fs.chunk_keys);
        wk.run_task(prog, first, last, c.b, m, n, k0, k1, o, l, [] {});
      },
      [&](step k) {
        if (k != step::merge_chunks || !split) return;
#pragma omp for schedule(static)
        for (std::size_t r = 0; r < rows; ++r) {
          const std::size_t b = r / pr.q_len / pr.q_heads, h = r / pr.q_len % pr.q_heads, i = r % pr.q_len;
          const Acc merged = kernel::merge_row<Acc>(
              chunks, [&](std::size_t c) { return part_lse[std::size_t(lse_at(b, h, i, c))]; },
              [&](std::size_t c) { return part_out.data() + part_at(b, h, i, c, 0); }, pr.v_dim, out.row(b, h, i),
              out.inner_stride());
          if (lse.data) lse(b, h, i) = merged;
          if (tap) row_lse[r] = merged;
        }
        if (!tap) return;
        std::vector<Acc> sum(fs.chunk_keys);
        const std::ptrdiff_t st = key_mass.inner_stride();
#pragma omp for schedule(static)
        for (std::size_t t = 0; t < pr.batch * pr.kv_heads * chunks; ++t) {
          const std::size_t b = t / chunks / pr.kv_heads, hk = t / chunks % pr.kv_heads, c = t % chunks;
          const std::size_t k0 = c * fs.chunk_keys, n = std::min(pr.kv_len, k0 + fs.chunk_keys) - k0;
          std::fill(sum.begin(), sum.begin() + std::ptrdiff_t(n), Acc(0));
          for (std::size_t h = hk * group; h < (hk + 1) * group; ++h)
            for (std::size_t i = 0; i < pr.q_len; ++i) {
              const Acc part = part_lse[std::size_t(lse_at(b, h, i, c))];
              if (std::isinf(part)) continue;  // the chunk held no key the row sees
              const Acc share = std::exp(part - row_lse[(b * pr.q_heads + h) * pr.q_len + i]);
              const Acc* w = chunk_w.get() + chunk_w_at(b, h, i, k0);
              for (std::size_t j = 0; j < n; ++j) sum[j] += share * w[j];
            }
          Acc* to = key_mass.row(b, hk) + std::ptrdiff_t(k0) * st;
          for (std::size_t j = 0; j < n; ++j) to[std::ptrdiff_t(j) * st] = sum[j];
        }
      });
  if (!tap || split) return;
  const std::ptrdiff_t st = key_mass.inner_stride();
  for (std::size_t b = 0; b < pr.batch; ++b)
    for (std::size_t hk = 0; hk < pr.kv_heads; ++hk) {
      Acc* to = key_mass.row(b, hk);
      for (std::size_t j = 0; j < pr.kv_len; ++j) to[std::ptrdiff_t(j) * st] = Acc(0);
      for (std::size_t th = 0; th < std::size_t(fs.threads); ++th) {
        const Acc* from = thread_mass.data() + th * mass_at.size() + mass_at(b, hk, 0);
        for (std::size_t j = 0; j < pr.kv_len; ++j) to[std::ptrdiff_t(j) * st] += from[j];
      }
    }
}

}  // namespace detail

/// softmax(...) * V into out (B, Hq, Sq, Dv) and, when lse has data, each row's log-sum-exp, by
/// the steps of prog (forward_program of fs); when key_mass has data, (B, Hkv, Skv), the softmax
/// weight each key received summed over the queries and the query heads of its key head. Over
/// selected keys, a pass per query position (forward/selected.hpp; no key mass).
template <class Acc, class Plan, class Out>
void run_fused(const Plan& p, const problem& pr, const forward_schedule& fs, const program& prog,
               const strided_view<Out>& out, const strided_view<Acc, 3>& lse = {},
               const strided_view<Acc, 3>& key_mass = {}) {
  with_turned_queries(p, "eval(e)", [&](const Plan& pq) {
    if constexpr (selects_v<Plan>)
      run_selected<Acc>(pq, pr, fs, out, lse,
                        [&](const Plan& one, const problem& at_i, const forward_schedule& fi,
                            const strided_view<Out>& o, const strided_view<Acc, 3>& l) {
                          detail::run_fused_pass<Acc>(
                              one, at_i, fi, forward_program(fi, detail::prepares_keys_v<Acc, Plan>), o, l, {});
                        });
    else
      detail::run_fused_pass<Acc>(pq, pr, fs, prog, out, lse, key_mass);
  });
}

/// The same, by the forward program of fs.
template <class Acc, class Plan, class Out>
void run_fused(const Plan& p, const problem& pr, const forward_schedule& fs, const strided_view<Out>& out,
               const strided_view<Acc, 3>& lse = {}, const strided_view<Acc, 3>& key_mass = {}) {
  run_fused<Acc>(p, pr, fs, forward_program(fs, detail::prepares_keys_v<Acc, Plan>), out, lse, key_mass);
}

/// The weights (kind weights) or the scores (kind scores) of a plan into out (B, Hq, Sq, Skv).
template <class Acc, class Plan, class Out>
void run_materialised(const Plan& p, const problem& pr, const forward_schedule& fs, const strided_view<Out>& out) {
  const program prog = forward_program(fs, detail::prepares_keys_v<Acc, Plan>);
  with_turned_queries(p, "eval(e)", [&](const Plan& pq) {
    detail::run_program<Acc>(
        pq, pr, fs, prog,
        [&](auto& wk, std::size_t t, std::size_t first, std::size_t last) {
          const forward_task c = forward_task_at(t, pr, fs);
          const auto [m, n] = wk.task_rows(c, 0);
          wk.run_task(prog, first, last, c.b, m, n, 0, pr.kv_len, out, strided_view<Acc, 3>{}, [] {});
        },
        [](step) {});
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
  // the scores pass's preparation and tasks; each task's steps are run_row_stats's
  detail::run_program<Acc>(
      p, pr, fs, forward_program(fs, detail::prepares_keys_v<Acc, Plan>),
      [&](auto& wk, std::size_t t, std::size_t, std::size_t) {
        const forward_task c = forward_task_at(t, pr, fs);
        if (needed(c.b, c.h, c.i0, std::min(fs.block_q, pr.q_len - c.i0)))
          wk.run_row_stats(c.b, c.h, c.i0, stats + rows_at(c.b, c.h, c.i0));
      },
      [](step) {});
}

}  // namespace xattn
