#pragma once
// Keys of the dot-product paths, packed into per-block panels (strips, see kernel::pack_kt) once
// per evaluation: every query block and every query head of a GQA group reads the same panels,
// instead of re-packing a key block per task.
#include "../kernel/tile_ops.hpp"
#include "../policy/problem.hpp"

#include <memory>

namespace xattn {

template <class T>
struct key_panels {
  std::size_t n = 0, bk = 0, blocks = 0, kv_heads = 0, size = 0;  // size: elements per panel
  std::unique_ptr<T[]> data;  // left uninitialised: pack_kt writes every element, padding included

  bool empty() const noexcept { return !data; }
  const T* panel(std::size_t b, std::size_t h, std::size_t kb) const noexcept {
    return data.get() + ((b * kv_heads + h) * blocks + kb) * size;
  }
};

/// Row stride of bk-wide score tiles: one batch more, so that with bk a power of two consecutive
/// rows do not share L1 sets (the 4 KiB aliasing trap).
template <class T>
constexpr std::size_t tile_stride(std::size_t bk) noexcept {
  return bk + simd::width<T>;
}

/// Storage for the panels of every (batch, kv head, key block); filled by pack_key_panels.
template <class T>
key_panels<T> make_key_panels(const problem& pr, std::size_t n, std::size_t bk) {
  key_panels<T> kp{n, bk, (pr.kv_len + bk - 1) / bk, pr.kv_heads, kernel::packed_kt_size<T>(bk, n), {}};
  kp.data = std::make_unique_for_overwrite<T[]>(pr.batch * pr.kv_heads * kp.blocks * kp.size);
  return kp;
}

/// Packs every panel; row(b, h, j) -> pointer to key j's n features, dstride apart. An orphaned
/// `omp for`: called inside the fused pass's parallel region, the threads share the panels (and
/// meet at its barrier) without waking a second team; outside one it runs serially.
template <class T, class RowFn>
void pack_key_panels(key_panels<T>& kp, const problem& pr, std::ptrdiff_t dstride, RowFn row) {
  const auto count = std::ptrdiff_t(pr.batch * pr.kv_heads * kp.blocks);
#pragma omp for schedule(static)
  for (std::ptrdiff_t t = 0; t < count; ++t) {
    const std::size_t kb = std::size_t(t) % kp.blocks, bh = std::size_t(t) / kp.blocks;
    const std::size_t b = bh / pr.kv_heads, h = bh % pr.kv_heads, j0 = kb * kp.bk;
    kernel::pack_kt([&](std::size_t c) { return row(b, h, j0 + c); }, std::min(kp.bk, pr.kv_len - j0), kp.n, dstride,
                    kp.data.get() + std::size_t(t) * kp.size);
  }
}

}  // namespace xattn
