#pragma once
// Results are new tensors on every call, and a large one is first touched page by page: on Linux
// with transparent huge pages left to madvise (Debian's default), each 4 KiB page faults on its
// own, which in a virtual machine can cost as much as computing a backward's gradients. Asking
// for huge pages makes one fault cover 2 MiB. Only the advice: where the kernel declines, nothing
// changes.
#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace xattn::kernel {

/// Buffers at least this large are advised to use huge pages.
inline constexpr std::size_t huge_page_advice_bytes = std::size_t(4) << 20;

/// Advises the kernel to back the whole 2 MiB pages inside [p, p + bytes) by huge pages (Linux;
/// elsewhere, and for smaller buffers, nothing). Call it before the buffer is first written.
inline void advise_huge_pages([[maybe_unused]] void* p, [[maybe_unused]] std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < huge_page_advice_bytes) return;
  constexpr std::uintptr_t huge = std::uintptr_t(2) << 20;
  const std::uintptr_t lo = (std::uintptr_t(p) + huge - 1) & ~(huge - 1),
                       hi = (std::uintptr_t(p) + bytes) & ~(huge - 1);
  if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#endif
}

}  // namespace xattn::kernel
