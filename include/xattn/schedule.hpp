#pragma once
// "How", separate from "what": tile sizes and threads. For a given block_k the result is bitwise
// the same for every thread count, every block_q and either way of packing keys: each (batch,
// head, query block) task runs alone over the keys in a fixed order. Another block_k regroups the
// online-softmax sums, so it may change the last bits. Zero means "choose":
// eval/plan/schedule.hpp makes every decision of a run in one function, and
// xattn::explain(e, schedule) prints them.
#include <cstddef>

namespace xattn {

struct schedule {
  std::size_t block_q = 0;              // query rows per task; 0: 60 (ten 6-row register blocks) or a short head's
                                        // queries, fewer if tasks are scarce
  std::size_t block_k = 0;              // keys per inner block (rounded up to whole SIMD batches); 0: from D, Dv and L2
  int threads = 0;                      // > 0: exactly this many; 0 (or negative): OpenMP's default, 1 for small work
  double serial_below_flop = 0;         // with threads = 0: one thread below this much work; 0: 2^22 flop
  std::size_t pack_per_head_below = 0;  // keys packed per head, by the thread using it, when one head's
                                        // packed keys take fewer bytes than this; 0: a quarter of L2
};

}  // namespace xattn
