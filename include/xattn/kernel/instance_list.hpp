// The kernel instantiations compiled once into libxattn_kernels: read twice, with
// XATTN_KERNEL_INSTANCE defined as `extern template` (instances.hpp, in every user's translation
// unit) and as `template` (src/kernels.cpp, the library). No include guard, on purpose.
// Only instantiations that depend on element types alone: the tile products every pipeline of
// that type calls, whatever its scoring function, masks or tensors.
namespace xattn::kernel {

#define XATTN_KERNEL_QK_INSTANCE(Acc, Range, Epi)                                                              \
  XATTN_KERNEL_INSTANCE void qk_tile<Acc, Acc, Range, Epi>(const Acc*, std::size_t, std::size_t, const Acc*,   \
                                                           std::size_t, std::size_t, Acc*, std::size_t, Range, \
                                                           const Epi&);
#define XATTN_KERNEL_PV_INSTANCE(Acc, name, Range)                                                                \
  XATTN_KERNEL_INSTANCE void name<Acc, Acc, Range>(const Acc*, std::size_t, std::size_t, const Acc*, std::size_t, \
                                                   std::size_t, Acc*, std::size_t, std::size_t, Range);
// A tensor's rows of Acc (or 16-bit rows widened as they are loaded): keys and values packed, keys
// read in place (decoding)
#define XATTN_KERNEL_ROWS_INSTANCE(Acc, K)                                                                          \
  XATTN_KERNEL_INSTANCE void pack_kt<Acc, Acc, strided_rows<K>>(strided_rows<K>, std::size_t, std::size_t,          \
                                                                std::ptrdiff_t, Acc*);                              \
  XATTN_KERNEL_INSTANCE void qk_direct<Acc, strided_rows<K>>(const Acc*, std::size_t, std::size_t, strided_rows<K>, \
                                                             std::size_t, std::size_t, Acc*, std::size_t,           \
                                                             row_prefetch);
// every_column: the forward and unmasked blocks; keys_seen and rows_seeing: the backward's masked
// blocks (eval/tiling/tile_extent.hpp's key_ranges)
#define XATTN_KERNEL_ACC_INSTANCES(Acc)                                                                            \
  XATTN_KERNEL_QK_INSTANCE(Acc, every_column, plain_epilogue)                                                      \
  XATTN_KERNEL_QK_INSTANCE(Acc, every_column, probs_epilogue<Acc>)                                                 \
  XATTN_KERNEL_QK_INSTANCE(Acc, every_column, softmax_grad_epilogue<Acc>)                                          \
  XATTN_KERNEL_QK_INSTANCE(Acc, keys_seen, plain_epilogue)                                                         \
  XATTN_KERNEL_QK_INSTANCE(Acc, keys_seen, probs_epilogue<Acc>)                                                    \
  XATTN_KERNEL_QK_INSTANCE(Acc, keys_seen, softmax_grad_epilogue<Acc>)                                             \
  XATTN_KERNEL_PV_INSTANCE(Acc, pv_tile_strips, every_column)                                                      \
  XATTN_KERNEL_PV_INSTANCE(Acc, pv_tile_strips, keys_seen)                                                         \
  XATTN_KERNEL_PV_INSTANCE(Acc, pv_tile_transposed_strips, every_column)                                           \
  XATTN_KERNEL_PV_INSTANCE(Acc, pv_tile_transposed_strips, rows_seeing)                                            \
  XATTN_KERNEL_INSTANCE void pv_tile_at<Acc, strided_rows<Acc>, every_column>(                                     \
      const Acc*, std::size_t, std::size_t, const strided_rows<Acc>&, std::size_t, Acc*, std::size_t, std::size_t, \
      every_column);                                                                                               \
  XATTN_KERNEL_ROWS_INSTANCE(Acc, Acc)

XATTN_KERNEL_ACC_INSTANCES(float)
XATTN_KERNEL_ACC_INSTANCES(double)
#undef XATTN_KERNEL_ACC_INSTANCES
#undef XATTN_KERNEL_PV_INSTANCE
#undef XATTN_KERNEL_QK_INSTANCE

// 16-bit keys and values read in place by float accumulators (decoding from a 16-bit cache or tensor)
XATTN_KERNEL_ROWS_INSTANCE(float, bfloat16)
XATTN_KERNEL_ROWS_INSTANCE(float, float16)
#undef XATTN_KERNEL_ROWS_INSTANCE
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
