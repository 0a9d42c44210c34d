#pragma once
// How the fused pass hands out its tasks: each thread owns a contiguous range and takes from its
// front; a thread whose range is empty steals from the back of another's. Contiguous ranges keep a
// thread on the heads whose keys it packed itself (still in its own L2), where a shared dynamic
// queue sends both threads through every head; stealing keeps the dynamic balance that uneven
// (causal) tasks and a slowed core need. Which thread runs a task never changes its result.
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace xattn {

class task_ranges {
 public:
  task_ranges(std::size_t tasks, std::size_t threads)
      : threads_(threads == 0 ? 1 : threads), ranges_(std::make_unique<range[]>(threads_)) {
    if (tasks > UINT32_MAX)  // (batch x heads x query blocks x key chunks): far beyond any memory
      throw std::invalid_argument("fused pass: " + std::to_string(tasks) + " tasks, more than 2^32 - 1");
    for (std::size_t t = 0; t < threads_; ++t)
      ranges_[t].bits.store(pack(tasks * t / threads_, tasks * (t + 1) / threads_), std::memory_order_relaxed);
  }

  /// The next task for `thread` (its own range first, then stolen), or nothing when all are taken.
  std::optional<std::size_t> next(std::size_t thread) {
    const std::size_t self = thread % threads_;
    if (auto t = take(self, true)) return t;
    for (std::size_t k = 1; k < threads_; ++k)
      if (auto t = take((self + k) % threads_, false)) return t;
    return std::nullopt;
  }

 private:
  struct alignas(64) range {             // one cache line each: owners do not contend on each other's ranges
    std::atomic<std::uint64_t> bits{0};  // begin << 32 | end
  };

  static std::uint64_t pack(std::size_t begin, std::size_t end) { return std::uint64_t(begin) << 32 | end; }

  std::optional<std::size_t> take(std::size_t r, bool front) {
    auto& bits = ranges_[r].bits;
    std::uint64_t cur = bits.load(std::memory_order_relaxed);
    for (;;) {
      const std::size_t begin = cur >> 32, end = cur & UINT32_MAX;
      if (begin >= end) return std::nullopt;
      const std::uint64_t want = front ? pack(begin + 1, end) : pack(begin, end - 1);
      if (bits.compare_exchange_weak(cur, want, std::memory_order_relaxed)) return front ? begin : end - 1;
    }
  }

  std::size_t threads_;
  std::unique_ptr<range[]> ranges_;
};

}  // namespace xattn
