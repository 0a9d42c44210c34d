// libxattn_kernels: the kernel instantiations of kernel/instance_list.hpp, compiled once for the
// project's -march (see kernel/instances.hpp), and a few other functions of every pipeline.
#undef XATTN_PRECOMPILED_KERNELS
#include <xattn/error.hpp>
#include <xattn/kernel/instances.hpp>
#include <xattn/random/philox_dropout.hpp>

#define XATTN_KERNEL_INSTANCE template
#include <xattn/kernel/instance_list.hpp>
#undef XATTN_KERNEL_INSTANCE

// Beside the kernels, what every pipeline compiles whatever its types: the shapes its messages
// print, and dropout's row scaling (compiled whether the pipeline drops or not).
template std::string xattn::shape_str(const std::array<std::size_t, 4>&);
template std::string xattn::shape_str(const std::vector<std::size_t>&);
template void xattn::random::detail::scale_row_impl<float>(const dropout&, std::uint32_t, std::uint32_t, std::uint32_t,
                                                           std::uint32_t, std::size_t, float*);
template void xattn::random::detail::scale_row_impl<double>(const dropout&, std::uint32_t, std::uint32_t, std::uint32_t,
                                                            std::uint32_t, std::size_t, double*);

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
