#pragma once
// "How", separate from "what": tile sizes and threads. For a given block_k the result is bitwise
// the same for every thread count and every block_q: each (batch, head, query block) task runs
// alone over the keys in a fixed order. Another block_k regroups the online-softmax sums, so it
// may change the last bits. Zero means "choose": eval/choose_schedule.hpp derives the blocks from
// the head sizes, the element size and the L2 cache, never from the thread count, except block_q
// (which changes no bit).
#include <cstddef>

namespace xattn {

struct schedule {
  std::size_t block_q = 0;  // query rows per task; 0: 60 (ten 6-row register blocks), fewer if tasks are scarce
  std::size_t block_k = 0;  // keys per inner block (rounded up to whole SIMD batches); 0: from D, Dv and L2
  int threads = 0;          // 0: OpenMP's default; 1: serial
};

}  // namespace xattn
