#pragma once
// Keys of the dot-product paths, packed into per-block panels (strips, see kernel::pack_kt) once
// per evaluation: every query block and every query head of a GQA group reads the same panels,
// instead of re-packing a key block per task. Short sequences instead pack one head at a time, in
// the thread that uses it (head_blocks). A panel format says what a panel holds: strips of the
// accumulator type for qk_tile, or bf16 feature pairs for vdpbf16ps (qk_tile on a pair tile).
#include "../../kernel/aligned.hpp"
#include "../../kernel/dpbf16.hpp"
#include "../../kernel/pack.hpp"
#include "../../layout.hpp"
#include "../../policy/problem.hpp"
#include "../plan/schedule.hpp"
#include "head_blocks.hpp"
#include "head_rows.hpp"

#include <algorithm>
#include <memory>

namespace xattn {

/// Panels of Acc in strips (kernel::pack_kt), for qk_tile.
template <class Acc>
struct strips {
  using element = Acc;
  static constexpr std::size_t size(std::size_t cols, std::size_t n) { return kernel::packed_kt_size<Acc>(cols, n); }
  template <class RowFn>
  static void pack(RowFn row, std::size_t cols, std::size_t n, std::ptrdiff_t dstride, Acc* at) {
    kernel::pack_kt<Acc>(row, cols, n, dstride, at);
  }
};

/// Panels of bf16 feature pairs (kernel::pack_kt into a pair tile), for qk_tile on pair tiles.
struct bf16_pairs {
  using element = bfloat16;
  static constexpr std::size_t size(std::size_t cols, std::size_t n) { return kernel::packed_pairs_size(cols, n); }
  template <class RowFn>
  static void pack(RowFn row, std::size_t cols, std::size_t n, std::ptrdiff_t dstride, bfloat16* at) {
    kernel::pack_kt(row, cols, n, dstride, kernel::in_pairs(at));
  }
};

/// Panels in Format: panel (b, kv head, key block) at data + at(b, h, kb), each n x bk keys.
template <class Format>
struct key_panels {
  using P = typename Format::element;
  std::size_t n = 0, bk = 0;
  layout<3> at;
  std::unique_ptr<P[], kernel::aligned_delete<P>> data;  // uninitialised: pack_kt writes every element

  bool empty() const noexcept { return !data; }
  const P* panel(std::size_t b, std::size_t h, std::size_t kb) const noexcept { return data.get() + at(b, h, kb); }
};

/// Row stride of bk-wide score tiles: one batch more, so that with bk a power of two consecutive
/// rows do not share L1 sets (the 4 KiB aliasing trap).
template <class Acc>
constexpr std::size_t tile_stride(std::size_t bk) noexcept {
  return bk + simd::width<Acc>;
}

/// Storage for the panels of every (batch, kv head, key block); filled by pack_key_panels.
template <class Format>
key_panels<Format> make_key_panels(const problem& pr, std::size_t n, std::size_t bk) {
  const std::size_t blocks = (pr.kv_len + bk - 1) / bk, size = Format::size(bk, n);
  key_panels<Format> kp{n, bk, layout<3>::row_major({pr.batch, pr.kv_heads, blocks}), {}};
  for (auto& s : kp.at.stride) s *= std::ptrdiff_t(size);
  kp.data = kernel::make_aligned_array<typename Format::element>(kp.at.size() * size);
  return kp;
}

/// Packs every panel; head(b, h) -> the keys of head (b, h), an accessor whose (j) points to key
/// j's n features (any element type), dstride apart. An orphaned `omp for`: called inside the
/// fused pass's parallel region, the threads share the panels (and meet at its barrier) without
/// waking a second team; outside one it runs serially.
template <class Format, class HeadRows>
void pack_key_panels(key_panels<Format>& kp, const problem& pr, std::ptrdiff_t dstride, HeadRows head) {
  const auto& sh = kp.at.shape;
  const auto count = std::ptrdiff_t(kp.at.size());
#pragma omp for schedule(static)
  for (std::ptrdiff_t t = 0; t < count; ++t) {
    const std::size_t kb = std::size_t(t) % sh[2], bh = std::size_t(t) / sh[2];
    const std::size_t b = bh / sh[1], h = bh % sh[1], j0 = kb * kp.bk;
    Format::pack(rows_from(head(b, h), j0), std::min(kp.bk, pr.kv_len - j0), kp.n, dstride,
                 kp.data.get() + kp.at(b, h, kb));
  }
}

/// One thread's panels of one (batch, kv head) at a time (key_reads::per_head), each
/// key block packed when a task first needs it.
template <class Format>
class head_panels {
 public:
  using P = typename Format::element;
  head_panels() = default;
  head_panels(const problem& pr, std::size_t n, std::size_t bk)
      : n_(n), bk_(bk), kv_len_(pr.kv_len), blocks_((pr.kv_len + bk - 1) / bk, Format::size(bk, n)) {}

  bool empty() const noexcept { return blocks_.empty(); }

  /// Panel kb of head (b, h); row(j) -> pointer to key j's n features (any element type), dstride
  /// apart.
  template <class RowFn>
  const P* panel(std::size_t b, std::size_t h, std::size_t kb, std::ptrdiff_t dstride, RowFn row) {
    return blocks_.block(b, h, kb, [&](std::size_t k, P* at) {
      const std::size_t j0 = k * bk_;
      Format::pack(rows_from(row, j0), std::min(bk_, kv_len_ - j0), n_, dstride, at);
    });
  }

 private:
  std::size_t n_ = 0, bk_ = 0, kv_len_ = 0;
  head_blocks<P> blocks_;
};

/// The keys of a dot-product path as its score tiles read them, as the schedule says (key_reads):
/// from the panels packed once per evaluation, from panels this thread packs per head, or in place
/// (panel() then returns null and the caller reads the rows).
template <class Format>
class key_reader {
 public:
  using P = typename Format::element;
  key_reader(const key_panels<Format>& shared, const problem& pr, std::size_t n, const forward_schedule& fs)
      : shared_(shared), keys_(fs.keys), bk_(fs.block_k) {
    if (keys_ == key_reads::per_head) own_ = head_panels<Format>(pr, n, bk_);
  }

  /// The panel of key block j0 of head (b, hk), or null when the keys are read in place; row(j)
  /// gives key j's features (any element type), dstride apart, for packing.
  template <class RowFn>
  const P* panel(std::size_t b, std::size_t hk, std::size_t j0, std::ptrdiff_t dstride, RowFn row) {
    switch (keys_) {
      case key_reads::panels:
        return shared_.panel(b, hk, j0 / bk_);
      case key_reads::per_head:
        return own_.panel(b, hk, j0 / bk_, dstride, row);
      default:
        return nullptr;
    }
  }

 private:
  const key_panels<Format>& shared_;
  key_reads keys_;
  std::size_t bk_;
  head_panels<Format> own_;
};

}  // namespace xattn
