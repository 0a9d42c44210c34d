#pragma once
// Memory the next piece of work will read or write, brought into cache a few lines at a time while
// the current piece computes. A short task (a head of 128 queries) finishes in microseconds, and
// the hardware prefetchers stop at every 4 KiB page, so the next head's rows would otherwise arrive
// page by page at memory latency when the task first touches them.
#include <array>
#include <cstddef>

namespace xattn::kernel {

class prefetch_queue {
 public:
  static constexpr std::size_t line = 64, capacity = 8;

  /// Rows [0, rows) of `bytes` each, `stride` bytes apart, from p; write: they will be written
  /// (prefetchw). Ignored when the queue is full.
  void add(const void* p, std::size_t rows, std::size_t bytes, std::ptrdiff_t stride, bool write = false) noexcept {
    if (rows == 0 || bytes == 0) return;
    if (n_ == capacity && first_ > 0) {  // drop the ranges already asked for
      for (std::size_t i = first_; i < n_; ++i) ranges_[i - first_] = ranges_[i];
      n_ -= first_;
      first_ = 0;
    }
    if (n_ == capacity) return;
    ranges_[n_++] = {static_cast<const char*>(p), rows, (bytes + line - 1) / line, stride, write};
    pending_ += rows * ((bytes + line - 1) / line);
  }

  /// Lines queued and not yet asked for.
  std::size_t pending() const noexcept { return pending_; }

  /// Asks for the next `lines` lines (into L2 and the levels beyond it).
  void issue(std::size_t lines) noexcept {
    while (lines > 0 && pending_ > 0) {
      range& r = ranges_[first_];
      const char* a = r.p + std::ptrdiff_t(row_) * r.stride + std::ptrdiff_t(line_ * line);
      if (r.write)
        __builtin_prefetch(a, 1, 2);
      else
        __builtin_prefetch(a, 0, 2);
      --lines;
      --pending_;
      if (++line_ < r.lines) continue;
      line_ = 0;
      if (++row_ < r.rows) continue;
      row_ = 0;
      ++first_;
    }
    if (pending_ == 0) n_ = first_ = 0;
  }

  /// Forgets what has not been asked for.
  void clear() noexcept { n_ = first_ = row_ = line_ = pending_ = 0; }

 private:
  struct range {
    const char* p;
    std::size_t rows, lines;
    std::ptrdiff_t stride;
    bool write;
  };
  std::array<range, capacity> ranges_{};
  std::size_t n_ = 0, first_ = 0, row_ = 0, line_ = 0, pending_ = 0;
};

}  // namespace xattn::kernel
