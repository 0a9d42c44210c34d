#pragma once
// Tiles and panels start on a cache line: on CPUs where a 64-byte load that straddles two lines
// costs two (Intel), misaligned rows would split most of the microkernels' loads. Rows inside a
// tile stay aligned because their strides are whole batches.
#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace xattn::kernel {

inline constexpr std::size_t tile_alignment = 64;

template <class T>
struct aligned_allocator {
  using value_type = T;
  aligned_allocator() = default;
  template <class U>
  aligned_allocator(const aligned_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new[](n * sizeof(T), std::align_val_t(tile_alignment)));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete[](p, std::align_val_t(tile_alignment)); }
  template <class U>
  bool operator==(const aligned_allocator<U>&) const noexcept {
    return true;
  }
};

/// A vector whose data starts on a cache line.
template <class T>
using aligned_vector = std::vector<T, aligned_allocator<T>>;

template <class T>
struct aligned_delete {
  void operator()(T* p) const noexcept { ::operator delete[](p, std::align_val_t(tile_alignment)); }
};

/// An array of n trivial elements on a cache line, left uninitialised (for storage the kernel
/// writes completely before reading, such as key panels).
template <class T>
std::unique_ptr<T[], aligned_delete<T>> make_aligned_array(std::size_t n) {
  return std::unique_ptr<T[], aligned_delete<T>>(
      static_cast<T*>(::operator new[](n * sizeof(T), std::align_val_t(tile_alignment))));
}

}  // namespace xattn::kernel
