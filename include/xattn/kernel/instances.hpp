#pragma once
// Precompiled kernels. Most of the time a translation unit takes to compile is the code of the
// tile products for its element type (their register-blocked variants), the same in every
// program. With XATTN_PRECOMPILED_KERNELS (the CMake target xattn::kernels sets it and links
// libxattn_kernels) they are declared `extern template` here and compiled once, into that library,
// for the same -march; without it everything stays header-only. A program whose translation units
// see a different SIMD width or bfloat16 support than the library was built with fails to link
// (xattn::kernel::precompiled::built_for_*), instead of mixing two register layouts.
#include "backward.hpp"
#include "dpbf16.hpp"
#include "pack.hpp"
#include "pv.hpp"
#include "qk.hpp"

#include <cstddef>

namespace xattn::kernel::precompiled {

/// The kernel layout a library of instantiations was compiled for: fp32 lanes per register and
/// whether vdpbf16ps is there. Each is defined only by a library built for that layout.
void built_for_16_lanes_bf16();
void built_for_16_lanes();
void built_for_8_lanes();
void built_for_4_lanes();

}  // namespace xattn::kernel::precompiled

#if defined(XATTN_PRECOMPILED_KERNELS) && !defined(XATTN_TRACE_TILE_OPS)  // traced kernels are the program's own
namespace xattn::kernel::precompiled {

/// Names the library's layout from every translation unit that uses it (a discarded branch names
/// nothing), so a library built for another one is an undefined reference at link time.
inline const bool layout_checked = [] {
  constexpr std::size_t lanes = simd::width<float>;
  if constexpr (lanes == 16 && has_dpbf16)
    built_for_16_lanes_bf16();
  else if constexpr (lanes == 16)
    built_for_16_lanes();
  else if constexpr (lanes == 8)
    built_for_8_lanes();
  else
    built_for_4_lanes();
  return true;
}();

}  // namespace xattn::kernel::precompiled

#define XATTN_KERNEL_INSTANCE extern template
#include "instance_list.hpp"
#undef XATTN_KERNEL_INSTANCE
#endif
