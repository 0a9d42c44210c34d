#pragma once
// Which piece of the problem a task index stands for, forward and backward. Both numberings keep
// the tasks that read the same keys next to each other; neither depends on the thread count, so
// sums taken over tasks in index order are the same for any team.
#include "../../policy/problem.hpp"
#include "../plan/schedule.hpp"

#include <algorithm>
#include <cstddef>

namespace xattn {

/// A forward task: queries [i0, i0 + block_q) of query head h of batch b against key chunk
/// `chunk`. With grouped rows (forward_schedule::group_rows), h is the group's first query head and
/// the task takes all of the group's heads.
struct forward_task {
  std::size_t b, h, i0, chunk;
};

/// Task t: the query heads of a GQA group fastest, then chunks, then query blocks, so consecutive
/// tasks read the same key panels.
inline forward_task forward_task_at(std::size_t t, const problem& pr, const forward_schedule& fs) noexcept {
  const std::size_t kv_heads = std::max<std::size_t>(pr.kv_heads, 1);
  if (fs.group_rows > 0) {
    const std::size_t c = t % fs.key_chunks, head = t / fs.key_chunks;
    return {head / kv_heads, head % kv_heads * fs.group_rows, 0, c};
  }
  const std::size_t group = std::max<std::size_t>(pr.q_heads / kv_heads, 1);
  const std::size_t g = t % group, c = t / group % fs.key_chunks, rest = t / group / fs.key_chunks;
  const std::size_t qb = rest % fs.q_blocks, head = rest / fs.q_blocks;
  return {head / kv_heads, head % kv_heads * group + g, qb * fs.block_q, c};
}

/// A backward task: key block `block` of chunk `chunk` of the (batch, kv head) `head`
/// (b · Hkv + hk), which has keys when chunk · chunk_keys + block · block_k < min(Skv, (chunk + 1) ·
/// chunk_keys). `id` numbers the tasks in an order that does not depend on the thread count.
struct backward_task {
  std::size_t head, chunk, block, id;
};

/// Task t: the streams (chunk, head) chunk-major, handed out in groups of bs.group streams, a key
/// block of each stream of the group in turn.
inline backward_task backward_task_at(std::size_t t, const backward_schedule& bs) noexcept {
  const std::size_t per_chunk = std::max<std::size_t>(bs.chunk_keys / std::max<std::size_t>(bs.block_k, 1), 1),
                    streams = bs.heads * bs.key_chunks, first = t / (bs.group * per_chunk) * bs.group,
                    width = std::min(bs.group, streams - first), within = t - first * per_chunk,
                    s = first + within % width;
  return {s % bs.heads, s / bs.heads, within / width, s * per_chunk + within / width};
}

}  // namespace xattn
