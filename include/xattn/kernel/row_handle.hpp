#pragma once
// What the kernels ask of a row, whether a pointer or a handle (a quantized row, q8_row.hpp,
// scaled_row.hpp): the storage element its bytes are counted in, and prefetching it. Handles
// answer through members (element, prefetch<L>), so a format's handle needs nothing here.
#include <cstddef>
#include <type_traits>

namespace xattn::kernel {

/// The storage element a row reads (what its bytes are counted in): a pointer's, or a handle's.
template <class R>
struct row_element {
  using type = std::remove_cv_t<std::remove_pointer_t<R>>;
};
template <class R>
requires requires { typename R::element; }
struct row_element<R> {
  using type = typename R::element;
};
template <class R>
using row_element_t = typename row_element<R>::type;

/// Asks for the cache lines holding `bytes` of a row from where it starts; a handle's own way
/// (its scales lie apart from its codes). An asm statement on x86: GCC takes a function whose only
/// effects are __builtin_prefetch for one without effects, and compiled such a callback (a block's
/// value rows prefetched with its keys) to a bare return.
template <int Locality = 3, class P>
[[gnu::always_inline]] inline void prefetch_row(const P* p, std::size_t bytes) noexcept {
  const char* a = reinterpret_cast<const char*>(p);
  for (std::size_t b = 0; b < bytes; b += 64) {
#if defined(__x86_64__) || defined(__i386__)
    if constexpr (Locality >= 3)
      asm volatile("prefetcht0 %0" : : "m"(a[b]));
    else if constexpr (Locality == 2)
      asm volatile("prefetcht1 %0" : : "m"(a[b]));
    else if constexpr (Locality == 1)
      asm volatile("prefetcht2 %0" : : "m"(a[b]));
    else
      asm volatile("prefetchnta %0" : : "m"(a[b]));
#else
    __builtin_prefetch(a + b, 0, Locality);
#endif
  }
}
template <int Locality = 3, class R>
requires requires(const R& r) { r.template prefetch<Locality>(std::size_t(0)); }
[[gnu::always_inline]] inline void prefetch_row(const R& r, std::size_t bytes) noexcept {
  r.template prefetch<Locality>(bytes);
}

}  // namespace xattn::kernel
