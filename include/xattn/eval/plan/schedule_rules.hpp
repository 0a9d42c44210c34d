#pragma once
// The rules of resolve_schedule (docs/design.md, "The resolved schedule"). A program linking
// xattn::kernels calls the copy compiled into that library (src/schedule.cpp); header-only, they
// are inline here.
#include "schedule.hpp"

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#ifndef XATTN_SCHEDULE_RULES_LINKAGE
#define XATTN_SCHEDULE_RULES_LINKAGE inline
#endif

namespace xattn {

namespace detail {

inline constexpr double default_serial_below_flop = double(1u << 22);  // waking a team ~ 40 us here
inline constexpr std::size_t max_decode_rows = 16;                     // rows per key head read keys in place at most
inline constexpr std::size_t max_group_rows = 256;                     // a grouped tile's rows at most
inline constexpr std::size_t min_chunk_keys = 1024;                    // keys per decoding chunk at least
inline constexpr std::size_t max_key_chunks = 8;

/// Threads for `flop` of work, and why: as requested, else OpenMP's default, or one below
/// serial_below_flop (waking a team costs more).
inline std::pair<int, std::string> resolve_threads(const schedule& requested, double flop, const machine& m) {
  const double serial_below = requested.serial_below_flop > 0 ? requested.serial_below_flop : default_serial_below_flop;
  if (!m.openmp) return {1, "built without OpenMP"};
  if (requested.threads > 0) return {requested.threads, "as requested"};
  if (flop < serial_below) return {1, "auto: the work is below serial_below_flop"};
  return {std::max(m.max_threads, 1), "auto: OpenMP's default"};
}

inline std::size_t blocks_of(std::size_t n, std::size_t block) {
  return (n + block - 1) / std::max<std::size_t>(block, 1);
}

/// The forward rules (see resolve_schedule).
inline forward_schedule resolve_forward(const schedule& requested, const problem& pr, const plan_facts& facts,
                                        pass_kind kind, const machine& m) {
  const path_facts& path = facts.path;
  forward_schedule r;
  r.kind = kind;
  const std::size_t dv = kind == pass_kind::attention ? pr.v_dim : 0;
  r.flop = 2.0 * double(pr.batch * pr.q_heads * pr.q_len) * double(pr.kv_len) * double(path.width + dv);
  std::tie(r.threads, r.threads_reason) = resolve_threads(requested, r.flop, m);

  std::size_t bk = requested.block_k;
  if (bk == 0) {
    bk = 512;
    while (bk > 64 && bk * (path.width + dv) * path.acc_bytes > m.l2_bytes) bk /= 2;
  }
  r.block_k = round_up(std::min(bk, std::max<std::size_t>(pr.kv_len, 1)), path.lanes);

  std::size_t bq = requested.block_q;
  if (bq == 0) {
    // a short head's queries in one task when their tile is no larger than the long sequences'
    // 60 x 512: no short last block of a few rows, and the per-task work done once per head
    bq = pr.q_len <= 128 && pr.q_len * r.block_k <= 60 * 512 ? std::max<std::size_t>(pr.q_len, 1) : 60;
    const std::size_t heads = pr.batch * pr.q_heads, want = 4 * std::size_t(r.threads);
    while (bq > 6 && heads * blocks_of(pr.q_len, bq) < want) bq = std::max<std::size_t>(bq - 6, 6);
  }
  r.block_q = std::min(bq, std::max<std::size_t>(pr.q_len, 1));  // blocks beyond the problem change nothing
  r.q_blocks = blocks_of(pr.q_len, r.block_q);

  r.decoding = pr.q_len * (pr.q_heads / std::max<std::size_t>(pr.kv_heads, 1)) <= max_decode_rows;
  const std::size_t head_bytes = pr.kv_len * path.width * path.acc_bytes,
                    per_head_below = requested.pack_per_head_below ? requested.pack_per_head_below : m.l2_bytes / 4;
  if (!path.dot_product)
    r.keys = key_reads::none;
  else if (path.keys_in_place_ok && r.decoding)
    r.keys = key_reads::in_place;
  else
    r.keys = head_bytes < per_head_below ? key_reads::per_head : key_reads::panels;

  // Values: decoding reads each value once, so a copy would double the bytes read; otherwise they
  // are packed once per head and thread, every query block of the head reading the copy, unless a
  // short head's rows of Acc can be read where they lie (they stay in L2 for its few blocks).
  const value_facts& v = facts.values;
  if (!r.decoding)
    r.values = v.bf16_pairs                                                    ? value_reads::bf16_pairs
               : r.keys == key_reads::per_head && v.same_type && v.in_place_ok ? value_reads::in_place
                                                                               : value_reads::strips;
  else if (v.in_place_ok)
    r.values = value_reads::in_place;
  else
    r.values = v.same_type ? value_reads::copied_per_task : value_reads::widened_per_head;

  if (kind == pass_kind::attention && pr.q_len <= max_decode_rows && pr.kv_len >= 2 * min_chunk_keys)
    r.key_chunks = std::min(max_key_chunks, pr.kv_len / std::max(min_chunk_keys, r.block_k));
  r.key_chunks = std::max<std::size_t>(r.key_chunks, 1);
  r.chunk_keys = round_up(blocks_of(pr.kv_len, r.key_chunks), r.block_k);
  r.key_chunks = std::max<std::size_t>(1, blocks_of(pr.kv_len, r.chunk_keys));
  // Grouped-query decoding: the query heads of a group read the same keys and values, so they are
  // the rows of one tile and each key is loaded once for all of them -- also for a group too large
  // to be bound by reading (MQA, absorbed MLA: 128 heads on one key head), whose rows would
  // otherwise each stream every key.
  const std::size_t group = pr.kv_heads > 0 ? pr.q_heads / pr.kv_heads : 1;
  if (kind == pass_kind::attention && group > 1 && pr.q_len <= max_decode_rows &&
      (r.keys == key_reads::in_place || (r.keys != key_reads::none && group * pr.q_len <= max_group_rows))) {
    r.group_rows = group;
    r.block_q = group * pr.q_len;
    // each key block serves one task: packed when that task reaches it, it is used from cache
    if (r.keys == key_reads::panels) r.keys = key_reads::per_head;
    r.q_blocks = 1;
    r.tasks = pr.batch * pr.kv_heads * r.key_chunks;
  } else {
    r.tasks = pr.batch * pr.q_heads * r.q_blocks * r.key_chunks;
  }
  r.prefetch_next = kind == pass_kind::attention && !r.decoding && r.keys == key_reads::per_head && r.group_rows == 0;
  return r;
}

/// The backward rules (see resolve_schedule).
inline backward_schedule resolve_backward(const schedule& requested, const problem& pr, const plan_facts& facts,
                                          const machine& m) {
  const path_facts& path = facts.path;
  backward_schedule r;
  r.flop = 2.0 * double(pr.batch * pr.q_heads * pr.q_len) * double(pr.kv_len) * double(3 * path.width + 2 * pr.v_dim);
  std::tie(r.threads, r.threads_reason) = resolve_threads(requested, r.flop, m);
  const std::size_t block = round_up(144, std::lcm<std::size_t>(6, path.strip));
  r.block_k = round_up(
      std::min<std::size_t>(requested.block_k ? requested.block_k : block, std::max<std::size_t>(pr.kv_len, 1)),
      path.lanes);
  std::size_t bq = r.block_k;
  while (bq * path.strip * path.acc_bytes > 24 * 1024 && bq % 12 == 0) bq /= 2;
  r.block_q = std::min<std::size_t>(requested.block_q ? requested.block_q : bq, std::max<std::size_t>(pr.q_len, 1));
  const std::size_t heads = pr.batch * pr.kv_heads, blocks = blocks_of(pr.kv_len, r.block_k);
  r.key_chunks =
      std::clamp<std::size_t>(blocks_of(8, heads), 1, std::min(max_key_chunks, std::max<std::size_t>(blocks, 1)));
  r.chunk_keys = blocks_of(blocks, r.key_chunks) * r.block_k;
  r.key_chunks = std::max<std::size_t>(1, blocks_of(pr.kv_len, r.chunk_keys));
  r.tasks = heads * r.key_chunks * (r.chunk_keys / std::max<std::size_t>(r.block_k, 1));
  r.heads = heads;
  r.group = std::size_t(std::max(r.threads, 1));
  const std::size_t nq = path.query_width ? path.query_width : path.width;
  r.dq_in_place = r.key_chunks == 1 && path.query_grads_dense && nq == round_up(nq, path.lanes);
  r.fused_epilogues = path.plain_products && !facts.modifiers && !facts.dropout;
  r.rescan = resolve_forward(requested, pr, facts, pass_kind::scores, m);
  return r;
}

}  // namespace detail

XATTN_SCHEDULE_RULES_LINKAGE resolved_schedule resolve_schedule(const schedule& requested, const problem& pr,
                                                                const plan_facts& facts, pass_kind kind,
                                                                const machine& m = machine::here()) {
  resolved_schedule r;
  r.forward = detail::resolve_forward(requested, pr, facts, kind, m);
  if (kind == pass_kind::attention) r.backward = detail::resolve_backward(requested, pr, facts, m);
  return r;
}

}  // namespace xattn

#undef XATTN_SCHEDULE_RULES_LINKAGE
