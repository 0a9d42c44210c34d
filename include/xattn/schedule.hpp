#pragma once
// "How", separate from "what": tile sizes and threads. For a given block_k the result is bitwise
// the same for every thread count and every block_q: each (batch, head, query block) task runs
// alone over the keys in a fixed order. Another block_k regroups the online-softmax sums, so it
// may change the last bits.
#include <cstddef>

namespace xattn {

struct schedule {
  std::size_t block_q = 60;   // query rows per task (a multiple of the 6-row register block)
  std::size_t block_k = 256;  // keys per inner block (rounded up to whole SIMD batches)
  int threads = 0;            // 0: OpenMP's default; 1: serial
};

}  // namespace xattn
