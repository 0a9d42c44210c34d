#pragma once
// "How", separate from "what": tile sizes and threads. Any schedule gives bitwise the same result
// for the same input and thread count... and the same across thread counts too, because every
// (batch, head, query block) task runs alone in a fixed order.
#include <cstddef>

namespace xattn {

struct schedule {
  std::size_t block_q = 60;   // query rows per task (a multiple of the 6-row register block)
  std::size_t block_k = 256;  // keys per inner block (rounded up to whole SIMD batches)
  int threads = 0;            // 0: OpenMP's default; 1: serial
};

}  // namespace xattn
