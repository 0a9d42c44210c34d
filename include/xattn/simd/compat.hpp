#pragma once
// The few xsimd 8.1 facilities the kernel needs, behind stable names: 8.1 spells the horizontal sum
// `hadd` and has no horizontal max, and later xsimd versions renamed both.
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <array>
#include <cstddef>

namespace xattn::simd {

template <class T>
using batch = xsimd::batch<T>;  // default architecture: follows -march

template <class T>
inline constexpr std::size_t width = batch<T>::size;

template <class T>
inline T hsum(const batch<T>& x) noexcept {
  return xsimd::hadd(x);
}

template <class T>
inline T hmax(const batch<T>& x) noexcept {
  alignas(64) std::array<T, width<T>> lanes;
  x.store_aligned(lanes.data());
  return *std::max_element(lanes.begin(), lanes.end());
}

template <class T>
inline batch<T> load(const T* p) noexcept {
  return batch<T>::load_unaligned(p);
}

template <class T>
inline void store(T* p, const batch<T>& x) noexcept {
  x.store_unaligned(p);
}

/// Number of elements rounded up to whole batches.
template <class T>
constexpr std::size_t padded(std::size_t n) noexcept {
  return (n + width<T> - 1) / width<T> * width<T>;
}

}  // namespace xattn::simd
