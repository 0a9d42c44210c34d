#pragma once
// Every "how" decision of a run, made in one function from the user's schedule, the sizes, the
// score path and the machine: block sizes, threads, whether keys are packed or read in place, and
// the split of long key ranges. xattn::explain prints the result.
//
// Block sizes, measured on the development machine (Zen 4, 1 MiB L2, fp32, Sq = Skv = 2048,
// 1 thread), GFLOP/s at block_k 256 -> 512: D = 32: 88 -> 92; 64: 97 -> 99; 128: 103 -> 104;
// 256: 100 -> 103; causal D = 64: 92 -> 94. Larger blocks pay the per-block costs (running-max
// rescale of O, block sums, classification) half as often; beyond 512 nothing more was measurable.
#include "../policy/problem.hpp"
#include "../schedule.hpp"

#include <unistd.h>
#include <algorithm>
#include <cstddef>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace xattn {

/// The facts about this machine that the schedule depends on.
struct machine {
  std::size_t l2_bytes = std::size_t(1) << 20;  // per core
  int max_threads = 1;                          // OpenMP's default team size
  bool openmp = false;                          // built with OpenMP

  static machine here() {
    machine m;
    static const std::size_t l2 = [] {
      const long b = sysconf(_SC_LEVEL2_CACHE_SIZE);
      return b > 0 ? std::size_t(b) : std::size_t(1) << 20;
    }();
    m.l2_bytes = l2;
#ifdef _OPENMP
    m.max_threads = omp_get_max_threads();
    m.openmp = true;
#endif
    return m;
  }
};

/// What a score path tells the schedule.
struct path_facts {
  bool dot_product = false;       // tiles by the qk microkernel: keys packed into panels, or read in place
  bool keys_in_place_ok = false;  // the key rows (or features) are contiguous and may be read where they lie
  std::size_t width = 0;          // features per query and key in the score product (n)
  std::size_t acc_bytes = 4;      // size of the accumulator type
  std::size_t lanes = 16;         // SIMD lanes of the accumulator type
};

/// What the run computes: the attention output, the weights, or the scores.
enum class pass_kind { attention, weights, scores };

struct resolved_schedule {
  std::size_t block_q = 0, block_k = 0;  // block_k in whole SIMD batches
  int threads = 1;
  std::size_t q_blocks = 0;    // per (batch, head)
  std::size_t key_chunks = 1;  // > 1: keys split into chunks merged by log-sum-exp
  std::size_t chunk_keys = 0;  // keys per chunk (whole blocks)
  bool decoding = false;       // at most max_decode_rows query rows per key head: bound by reading K and V
  bool keys_in_place = false;  // keys scored where they lie, not packed
  std::size_t group_rows = 0;  // > 0: grouped-query decoding, the group's query heads as one task's rows
  bool pack_panels = false;    // keys packed into per-block panels once per evaluation
  bool pack_per_head = false;  // or per (batch, kv head) by the thread using it (short sequences)
  std::size_t tasks = 0;       // B · Hq · q_blocks · key_chunks (grouped rows: B · Hkv · key_chunks)
  double flop = 0;             // 2 · B · Hq · Sq · Skv · (n + Dv)
  std::string threads_reason;  // why this many threads
};

namespace detail {

inline constexpr double default_serial_below_flop = double(1u << 22);  // waking a team ~ 40 us here
inline constexpr std::size_t max_decode_rows = 16;                     // rows per key head read keys in place at most
inline constexpr std::size_t min_chunk_keys = 1024;                    // keys per decoding chunk at least
inline constexpr std::size_t max_key_chunks = 8;

inline std::size_t padded_to(std::size_t n, std::size_t lanes) { return (n + lanes - 1) / lanes * lanes; }

/// Threads for `flop` of work, and why: as requested, else OpenMP's default, or one below
/// serial_below_flop (waking a team costs more).
inline std::pair<int, std::string> resolve_threads(const schedule& requested, double flop, const machine& m) {
  const double serial_below = requested.serial_below_flop > 0 ? requested.serial_below_flop : default_serial_below_flop;
  if (!m.openmp) return {1, "built without OpenMP"};
  if (requested.threads > 0) return {requested.threads, "as requested"};
  if (flop < serial_below) return {1, "auto: the work is below serial_below_flop"};
  return {std::max(m.max_threads, 1), "auto: OpenMP's default"};
}

}  // namespace detail

/// The schedule a run uses.
///  - threads: a count the user sets is used as given; 0 means OpenMP's default, or one thread when
///    the work is below serial_below_flop (default 2^22 flop: waking a team costs more).
///  - block_k: 512 keys, halved (down to 64) until one key block's packed keys and values,
///    block_k · (n + Dv) elements, fit in L2 -- the next block's keys then stream in beside them.
///  - block_q: 60 query rows; with fewer than 4 tasks per thread, smaller multiples of 6 so the
///    hand-out can balance (block_q never changes a result bit).
///  - keys packed into panels: once per evaluation, or, when one head's panels take less than a
///    quarter of L2, per head by the thread whose task needs it (then still in its L2 when used:
///    (32, 12, 128, 128, 64), 1 thread, alternating runs: 14 % faster than packed beforehand).
///  - decoding (at most 16 query rows per key head): keys scored in place, not packed; with no more
///    than 16 query rows and at least 2048 keys, the keys split into up to 8 chunks of whole blocks
///    (at least 1024 keys each) merged by log-sum-exp. The split depends only on the shape, never on
///    the thread count, so results stay bitwise identical across thread counts. With grouped
///    queries, one task takes the group's query heads as the rows of one tile.
inline resolved_schedule resolve_schedule(const schedule& requested, const problem& pr, const path_facts& path,
                                          pass_kind kind, const machine& m = machine::here()) {
  using namespace detail;
  resolved_schedule r;
  const std::size_t dv = kind == pass_kind::attention ? pr.v_dim : 0;
  r.flop = 2.0 * double(pr.batch * pr.q_heads * pr.q_len) * double(pr.kv_len) * double(path.width + dv);

  std::tie(r.threads, r.threads_reason) = resolve_threads(requested, r.flop, m);

  std::size_t bk = requested.block_k;
  if (bk == 0) {
    bk = 512;
    while (bk > 64 && bk * (path.width + dv) * path.acc_bytes > m.l2_bytes) bk /= 2;
  }
  r.block_k = padded_to(std::min(bk, std::max<std::size_t>(pr.kv_len, 1)), path.lanes);

  std::size_t bq = requested.block_q;
  if (bq == 0) {
    bq = 60;
    const std::size_t heads = pr.batch * pr.q_heads, want = 4 * std::size_t(r.threads);
    while (bq > 6 && heads * ((pr.q_len + bq - 1) / bq) < want) bq -= 6;
  }
  r.block_q = std::min(bq, std::max<std::size_t>(pr.q_len, 1));  // blocks beyond the problem change nothing
  r.q_blocks = (pr.q_len + r.block_q - 1) / r.block_q;

  r.decoding = pr.q_len * (pr.q_heads / std::max<std::size_t>(pr.kv_heads, 1)) <= max_decode_rows;
  r.keys_in_place = path.dot_product && path.keys_in_place_ok && r.decoding;
  const std::size_t head_bytes = pr.kv_len * path.width * path.acc_bytes,
                    per_head_below = requested.pack_per_head_below ? requested.pack_per_head_below : m.l2_bytes / 4;
  r.pack_per_head = path.dot_product && !r.keys_in_place && head_bytes < per_head_below;
  r.pack_panels = path.dot_product && !r.keys_in_place && !r.pack_per_head;
  if (kind == pass_kind::attention && pr.q_len <= max_decode_rows && pr.kv_len >= 2 * min_chunk_keys)
    r.key_chunks = std::min(max_key_chunks, pr.kv_len / std::max(min_chunk_keys, r.block_k));
  r.key_chunks = std::max<std::size_t>(r.key_chunks, 1);
  r.chunk_keys = ((pr.kv_len + r.key_chunks - 1) / r.key_chunks + r.block_k - 1) / r.block_k * r.block_k;
  r.key_chunks = std::max<std::size_t>(1, (pr.kv_len + r.chunk_keys - 1) / std::max<std::size_t>(r.chunk_keys, 1));
  // Grouped-query decoding: the query heads of a group read the same keys and values, so they are
  // the rows of one tile (each key loaded once for all of them, not once per head: one task per
  // head read 8.8 GB/s where plain decoding reads 22.8).
  const std::size_t group = pr.kv_heads > 0 ? pr.q_heads / pr.kv_heads : 1;
  if (kind == pass_kind::attention && r.keys_in_place && group > 1) {
    r.group_rows = group;
    r.block_q = group * pr.q_len;  // at most max_decode_rows: decoding
    r.q_blocks = 1;
    r.tasks = pr.batch * pr.kv_heads * r.key_chunks;
  } else {
    r.tasks = pr.batch * pr.q_heads * r.q_blocks * r.key_chunks;
  }
  return r;
}

/// The backward pass's schedule: key-block-outer tasks (batch, key head, key block), each keeping
/// dK and dV of its key block while it walks every query block of the heads that read it.
///  - block_k (or as requested): the least multiple of 6 and of the score microkernel's strip width
///    (16 floats with AVX2, 64 with AVX-512) that is at least 144: whole 6-row register blocks and
///    whole strips. AVX2: 144 (= 24 x 6 = 9 x 16; 96 and 144 within 1 % at D = 64 and 128, 1 x 8 x
///    2048², 1 thread). AVX-512: 192; at 144 a ninth of the score products' columns went through
///    the one-batch-wide microkernel at half the rate.
///  - block_q (or as requested): block_k, halved while a strip of the transposed products' right
///    operand (block_q rows of the strip width) exceeds 24 KiB and the half is a multiple of 6, so
///    that the strip serves every register block of keys from L1: AVX2 144, AVX-512 96 (at D = 128,
///    1 x 8 x 2048², 1 thread: 70 % of the FMA peak against 68 % at 192). block_q divides block_k,
///    so a causal diagonal cuts the same area of partial tiles as square blocks (120 x 128 did not:
///    causal backward 6 % slower).
///  - key_chunks: enough chunks for 8 when batch x key heads is smaller, up to 8 and at least block_k
///    keys each. dQ gathers one partial per chunk, summed in chunk order: like the forward's
///    decoding split this depends on the shape only, so the gradients are bitwise identical for
///    every thread count.
///  - tasks: one per key block. A chunk's key blocks add into its dQ partial in key order (each
///    query block waits for its turn), so they may run on any threads and the sums are those of one
///    thread. The streams (chunk, batch x key head) are handed out in groups of as many as there
///    are threads, a key block of each in turn: two threads then mostly work on two streams, whose
///    operands fit in L3 (one stream's blocks after another's: 30 % slower at (1, 8, 2048², 128)),
///    and the last tasks are single key blocks. With tasks of whole chunks (8 at (1, 8, 2048², D))
///    one of two threads slowed by its host left the other idle for up to 10 % of the run.
///  - threads as in resolve_schedule, by the backward's flop.
struct backward_schedule {
  std::size_t block_q = 0, block_k = 0;
  int threads = 1;
  std::size_t key_chunks = 1, chunk_keys = 0;
  std::size_t tasks = 0;  // B · Hkv · key_chunks · blocks per chunk (slots past a short last chunk idle)
  std::size_t heads = 0;  // B · Hkv
  std::size_t group = 1;  // streams handed out together: the thread count
  double flop = 0;        // 2 · B · Hq · Sq · Skv · (3n + 2Dv): S, dQ, dK and dP, dV
  std::string threads_reason;

  /// Task t: key block `block` of chunk `chunk` of head `head` (b · Hkv + hk), which has keys when
  /// chunk · chunk_keys + block · block_k < min(Skv, (chunk + 1) · chunk_keys). `id` numbers the
  /// tasks in an order that does not depend on the thread count (sums over tasks go in it).
  struct key_task {
    std::size_t head, chunk, block, id;
  };
  key_task task_at(std::size_t t) const noexcept {
    const std::size_t per_chunk = std::max<std::size_t>(chunk_keys / std::max<std::size_t>(block_k, 1), 1),
                      streams = heads * key_chunks, first = t / (group * per_chunk) * group,
                      width = std::min(group, streams - first), within = t - first * per_chunk,
                      s = first + within % width;  // streams chunk-major: every head's first chunk first
    return {s % heads, s / heads, within / width, s * per_chunk + within / width};
  }
};

inline backward_schedule resolve_backward(const schedule& requested, const problem& pr, std::size_t width,
                                          std::size_t lanes, std::size_t strip, std::size_t elem_bytes,
                                          const machine& m = machine::here()) {
  using namespace detail;
  backward_schedule r;
  r.flop = 2.0 * double(pr.batch * pr.q_heads * pr.q_len) * double(pr.kv_len) * double(3 * width + 2 * pr.v_dim);
  std::tie(r.threads, r.threads_reason) = resolve_threads(requested, r.flop, m);
  const std::size_t block = padded_to(144, std::lcm<std::size_t>(6, strip));
  r.block_k = padded_to(
      std::min<std::size_t>(requested.block_k ? requested.block_k : block, std::max<std::size_t>(pr.kv_len, 1)), lanes);
  std::size_t bq = r.block_k;
  while (bq * strip * elem_bytes > 24 * 1024 && bq % 12 == 0) bq /= 2;
  r.block_q = std::min<std::size_t>(requested.block_q ? requested.block_q : bq, std::max<std::size_t>(pr.q_len, 1));
  const std::size_t heads = pr.batch * pr.kv_heads, blocks = (pr.kv_len + r.block_k - 1) / r.block_k;
  r.key_chunks = std::clamp<std::size_t>((8 + heads - 1) / std::max<std::size_t>(heads, 1), 1,
                                         std::min(max_key_chunks, std::max<std::size_t>(blocks, 1)));
  r.chunk_keys = (blocks + r.key_chunks - 1) / r.key_chunks * r.block_k;
  r.key_chunks = std::max<std::size_t>(1, (pr.kv_len + r.chunk_keys - 1) / std::max<std::size_t>(r.chunk_keys, 1));
  r.tasks = heads * r.key_chunks * (r.chunk_keys / std::max<std::size_t>(r.block_k, 1));
  r.heads = heads;
  r.group = std::size_t(std::max(r.threads, 1));
  return r;
}

}  // namespace xattn
