#pragma once
// One thread's copies of the key blocks of one (batch, kv head) at a time -- keys packed into
// panels, or values widened from 16 bits -- each made when a task first needs it. A thread's tasks
// take a head's query blocks in turn, so each block is made about once, just before use, and is
// still in that core's L2 when the head's next task reads it. Copies of every head made beforehand
// go out to memory and back; copies made per task repeat the work for every query block.
#include "../../kernel/aligned.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

namespace xattn {

template <class T>
class head_blocks {
 public:
  head_blocks() = default;
  head_blocks(std::size_t blocks, std::size_t block_size)
      : size_(block_size), made_(blocks, false), data_(kernel::make_aligned_array<T>(blocks * block_size)) {}

  bool empty() const noexcept { return !data_; }

  /// Block kb of head (b, h); make(kb, T* block) fills it the first time it is asked for.
  template <class Make>
  const T* block(std::size_t b, std::size_t h, std::size_t kb, Make&& make) {
    if (b != b_ || h != h_) {
      std::fill(made_.begin(), made_.end(), false);
      b_ = b;
      h_ = h;
    }
    T* at = data_.get() + kb * size_;
    if (!made_[kb]) {
      make(kb, at);
      made_[kb] = true;
    }
    return at;
  }

 private:
  std::size_t size_ = 0;
  std::size_t b_ = std::size_t(-1), h_ = std::size_t(-1);  // the head held (none yet)
  std::vector<bool> made_;                                 // per key block of that head
  std::unique_ptr<T[], kernel::aligned_delete<T>> data_;
};

}  // namespace xattn
