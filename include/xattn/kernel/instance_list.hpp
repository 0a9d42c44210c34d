// The kernel instantiations compiled once into libxattn_kernels: read twice, with
// XATTN_KERNEL_INSTANCE defined as `extern template` (instances.hpp, in every user's translation
// unit) and as `template` (src/kernels.cpp, the library). No include guard, on purpose.
// Only instantiations that depend on element types alone: the tile products every pipeline of
// that type calls, whatever its scoring function, masks or tensors.
namespace xattn::kernel {

#define XATTN_KERNEL_ACC_INSTANCES(Acc)                                                                               \
  XATTN_KERNEL_INSTANCE void qk_tile<Acc, Acc, every_column, plain_epilogue>(                                         \
      const Acc*, std::size_t, std::size_t, const Acc*, std::size_t, std::size_t, Acc*, std::size_t, every_column,    \
      const plain_epilogue&);                                                                                         \
  XATTN_KERNEL_INSTANCE void qk_tile<Acc, Acc, every_column, probs_epilogue<Acc>>(                                    \
      const Acc*, std::size_t, std::size_t, const Acc*, std::size_t, std::size_t, Acc*, std::size_t, every_column,    \
      const probs_epilogue<Acc>&);                                                                                    \
  XATTN_KERNEL_INSTANCE void qk_tile<Acc, Acc, every_column, softmax_grad_epilogue<Acc>>(                             \
      const Acc*, std::size_t, std::size_t, const Acc*, std::size_t, std::size_t, Acc*, std::size_t, every_column,    \
      const softmax_grad_epilogue<Acc>&);                                                                             \
  XATTN_KERNEL_INSTANCE void pv_tile_strips<Acc, Acc, every_column>(const Acc*, std::size_t, std::size_t, const Acc*, \
                                                                    std::size_t, std::size_t, Acc*, std::size_t,      \
                                                                    std::size_t, every_column);                       \
  XATTN_KERNEL_INSTANCE void pv_tile_transposed_strips<Acc, Acc, every_column>(                                       \
      const Acc*, std::size_t, std::size_t, const Acc*, std::size_t, std::size_t, Acc*, std::size_t, std::size_t,     \
      every_column);                                                                                                  \
  XATTN_KERNEL_INSTANCE void pv_tile_at<Acc, strided_rows<Acc>, every_column>(                                        \
      const Acc*, std::size_t, std::size_t, const strided_rows<Acc>&, std::size_t, Acc*, std::size_t, std::size_t,    \
      every_column);

XATTN_KERNEL_ACC_INSTANCES(float)
XATTN_KERNEL_ACC_INSTANCES(double)
#undef XATTN_KERNEL_ACC_INSTANCES

// 16-bit values read in place by float accumulators (decoding from a 16-bit cache or tensor)
XATTN_KERNEL_INSTANCE void pv_tile_at<float, strided_rows<bfloat16>, every_column>(const float*, std::size_t,
                                                                                   std::size_t,
                                                                                   const strided_rows<bfloat16>&,
                                                                                   std::size_t, float*, std::size_t,
                                                                                   std::size_t, every_column);
XATTN_KERNEL_INSTANCE void pv_tile_at<float, strided_rows<float16>, every_column>(const float*, std::size_t,
                                                                                  std::size_t,
                                                                                  const strided_rows<float16>&,
                                                                                  std::size_t, float*, std::size_t,
                                                                                  std::size_t, every_column);

}  // namespace xattn::kernel
