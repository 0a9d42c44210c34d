#pragma once
// Fixed-size pages handed out by index and shared by reference count. Storage grows in slabs as
// pages are first used, so a large pool costs nothing until filled, and a page never moves. A
// slab holds its pages part by part (all pages' first part, then all pages' second part, ...), so
// the same part of consecutive pages is contiguous: a cache keeps one head's rows of a sequence
// appended in one go in one run of memory, which the hardware prefetchers stream like a tensor.
#include "../error.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <vector>

namespace xattn::detail {

class page_pool {
 public:
  page_pool() = default;
  page_pool(std::size_t page_bytes, std::size_t max_pages)
      : page_bytes_(page_bytes),
        max_pages_(max_pages),
        per_slab_(std::max<std::size_t>(1, std::min<std::size_t>(max_pages, slab_bytes / page_bytes_))) {}

  std::size_t max_pages() const noexcept { return max_pages_; }
  /// Pages not held by any sequence: released ones and those never used.
  std::size_t free_pages() const noexcept { return free_.size() + (max_pages_ - used_); }
  std::uint32_t refs(std::uint32_t p) const noexcept { return refs_[p]; }

  /// Part `offset` bytes into a page (of a part kind `size` bytes long): the parts of a page lie
  /// apart, each next to the same part of the slab's next page.
  std::byte* part(std::uint32_t p, std::size_t offset, std::size_t size) noexcept {
    return slabs_[p / per_slab_].get() + offset * per_slab_ + (p % per_slab_) * size;
  }
  const std::byte* part(std::uint32_t p, std::size_t offset, std::size_t size) const noexcept {
    return slabs_[p / per_slab_].get() + offset * per_slab_ + (p % per_slab_) * size;
  }
  /// Bytes from a part of a page to the next part of the same size (offset + size) of that page.
  std::size_t part_stride(std::size_t size) const noexcept { return size * per_slab_; }

  /// n pages, each with one reference, or nothing at all (std::length_error naming `who` when the
  /// pool has fewer free; std::bad_alloc from a slab leaves the pool as it was).
  std::vector<std::uint32_t> acquire(std::size_t n, const char* who) {
    if (n > free_pages())
      throw std::length_error(std::string("xattn: ") + who + ": needs " + std::to_string(n) + " pages but " +
                              std::to_string(free_pages()) + " of the pool's " + std::to_string(max_pages_) +
                              " are free");
    std::vector<std::uint32_t> got;
    got.reserve(n);
    const std::size_t reused = std::min(n, free_.size()), fresh = n - reused;
    grow(used_ + fresh);
    for (std::size_t i = 0; i < reused; ++i) got.push_back(free_[free_.size() - 1 - i]);
    free_.resize(free_.size() - reused);
    for (std::size_t i = 0; i < fresh; ++i) {
      got.push_back(std::uint32_t(used_++));
      refs_.push_back(0);
    }
    for (const auto p : got) refs_[p] = 1;
    return got;
  }

  /// Memory for the first n pages (at most max_pages), allocated and touched now.
  void reserve(std::size_t n) { grow(std::min(n, max_pages_)); }

  void retain(std::uint32_t p) noexcept { ++refs_[p]; }
  /// Drops one reference; the page is free when none is left. free_ has room: reserved in acquire.
  void release(std::uint32_t p) {
    if (--refs_[p] == 0) free_.push_back(p);
  }
  /// Room for every page in the free list, so that release never allocates.
  void reserve_free() { free_.reserve(max_pages_); }

 private:
  /// Slabs for pages [0, n): a throw leaves only unused slabs behind. Slabs are zeroed, which
  /// touches their memory (the page faults of a fresh slab are taken here).
  void grow(std::size_t n) {
    const std::size_t need_slabs = (n + per_slab_ - 1) / per_slab_;
    if (need_slabs <= slabs_.size()) return;
    slabs_.reserve(need_slabs);
    refs_.reserve(std::min(max_pages_, need_slabs * per_slab_));
    while (slabs_.size() < need_slabs)
      slabs_.emplace_back(new (std::align_val_t{64}) std::byte[per_slab_ * page_bytes_]());
  }

  struct aligned_delete {
    void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
  };
  static constexpr std::size_t slab_bytes = std::size_t(1) << 26;  // long runs per part, few allocations
  std::size_t page_bytes_ = 0, max_pages_ = 0, per_slab_ = 1, used_ = 0;
  std::vector<std::unique_ptr<std::byte[], aligned_delete>> slabs_;
  std::vector<std::uint32_t> refs_, free_;
};

}  // namespace xattn::detail
