// libxattn_kernels: the kernel instantiations of kernel/instance_list.hpp, compiled once for the
// project's -march (see kernel/instances.hpp).
#undef XATTN_PRECOMPILED_KERNELS
#include <xattn/kernel/instances.hpp>

#define XATTN_KERNEL_INSTANCE template
#include <xattn/kernel/instance_list.hpp>
#undef XATTN_KERNEL_INSTANCE

namespace xattn::kernel::precompiled {

namespace {
constexpr std::size_t lanes = simd::width<float>;
}

// Exactly one of these is defined: the layout of this library's kernels (the static_asserts check
// that the preprocessor's view agrees with the one instances.hpp names).
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
void built_for_16_lanes_bf16() { static_assert(lanes == 16 && has_dpbf16); }
#elif defined(__AVX512F__)
void built_for_16_lanes() { static_assert(lanes == 16 && !has_dpbf16); }
#elif defined(__AVX__)
void built_for_8_lanes() { static_assert(lanes == 8); }
#else
void built_for_4_lanes() { static_assert(lanes == 4); }
#endif

}  // namespace xattn::kernel::precompiled
