#pragma once
// Tile sizes chosen when the schedule leaves them at 0, from the problem and the machine's L2.
// Measured on the development machine (Zen 4, 1 MiB L2, fp32, Sq = Skv = 2048, 1 thread), GFLOP/s
// at block_k 256 -> 512: D = 32: 88 -> 92; 64: 97 -> 99; 128: 103 -> 104; 256: 100 -> 103;
// causal D = 64: 92 -> 94. Larger blocks pay the per-block costs (running-max rescale of O, block
// sums, classification) half as often; beyond 512 nothing more was measurable.
#include "../policy/problem.hpp"
#include "../schedule.hpp"

#include <algorithm>
#include <unistd.h>

namespace xattn {

/// Bytes of L2 cache per core (sysconf), 1 MiB when the system does not say.
inline std::size_t l2_cache_bytes() {
  static const std::size_t bytes = [] {
    const long b = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return b > 0 ? std::size_t(b) : std::size_t(1) << 20;
  }();
  return bytes;
}

/// The schedule a run uses: the user's non-zero fields, the rest chosen.
///  - block_k: 512 keys, halved (down to 64) until one key block's packed keys and values,
///    block_k · (n + Dv) elements, fit in L2 -- the next block's keys then stream in beside them.
///  - block_q: 60 query rows; with fewer than 4 tasks per thread, smaller multiples of 6 so the
///    dynamic hand-out can balance (block_q never changes a result bit).
/// Both are then clamped to the problem.
inline schedule choose_schedule(const schedule& requested, const problem& pr, std::size_t n, std::size_t elem_bytes,
                                int threads) {
  schedule s = requested;
  if (s.block_k == 0) {
    s.block_k = 512;
    while (s.block_k > 64 && s.block_k * (n + pr.v_dim) * elem_bytes > l2_cache_bytes()) s.block_k /= 2;
  }
  if (s.block_q == 0) {
    s.block_q = 60;
    const std::size_t heads = pr.batch * pr.q_heads, want = 4 * std::size_t(std::max(threads, 1));
    while (s.block_q > 6 && heads * ((pr.q_len + s.block_q - 1) / s.block_q) < want) s.block_q -= 6;
  }
  s.block_q = std::min(s.block_q, std::max<std::size_t>(pr.q_len, 1));  // blocks beyond the problem change nothing
  s.block_k = std::min(s.block_k, std::max<std::size_t>(pr.kv_len, 1));
  return s;
}

}  // namespace xattn
