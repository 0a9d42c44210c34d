#pragma once
// P·V by vdpbf16ps for bfloat16 values (kernel/dpbf16.hpp). A thread packs the value rows of the
// head it works on in key pairs, block by block when a task first needs one (head_blocks, as for
// widened values), and rounds each tile's probabilities to bf16 just before the product: the
// PyTorch and oneDNN convention for bf16 attention, the one rounding this adds to fp32's (docs/
// numerics.md). Decoding keeps reading V in place, widened in registers: it is bound by memory.
#include "../../kernel/aligned.hpp"
#include "../../kernel/dpbf16.hpp"
#include "../../policy/problem.hpp"
#include "../operands/head_blocks.hpp"

#include <algorithm>

namespace xattn {

/// Whether P·V of values of type V in a pass accumulating in Acc runs on vdpbf16ps.
template <class Acc, class V>
inline constexpr bool takes_value_pairs_v =
    kernel::has_dpbf16&& std::is_same_v<Acc, float>&& std::is_same_v<V, bfloat16>;

template <class Acc>
class value_pairs {
 public:
  value_pairs() = default;
  value_pairs(const problem& pr, std::size_t bq, std::size_t bk, std::size_t dvp)
      : kv_len_(pr.kv_len),
        dv_(pr.v_dim),
        bk_(bk),
        dvp_(dvp),
        ldp_(bk + 32),
        blocks_((pr.kv_len + bk - 1) / bk, bk * dvp),
        p16_(bq * ldp_) {}

  bool empty() const noexcept { return blocks_.empty(); }

  /// o[r, :] += p[r, :cols] · V[j0 : j0 + cols] for r < rows (p: fp32 probabilities, lds apart,
  /// zero from cols to the next multiple of 16), V rows of head (b, hk) from the view vv.
  template <class View>
  void accumulate(const View& vv, std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols, const Acc* p,
                  std::size_t lds, std::size_t rows, Acc* o, std::size_t ldo) {
    const bfloat16* vp = blocks_.block(b, hk, j0 / bk_, [&](std::size_t kb, bfloat16* to) {
      const std::size_t k0 = kb * bk_;
      kernel::pack_strips([&](std::size_t j) { return vv.row(b, hk, k0 + j); }, std::min(bk_, kv_len_ - k0), dv_,
                          vv.inner_stride(), kernel::in_pairs(to), dvp_);
    });
    const std::size_t colsp = simd::padded<Acc>(cols);  // as the worker padded p
    for (std::size_t r = 0; r < rows; ++r) kernel::round_row_bf16(p + r * lds, colsp, p16_.data() + r * ldp_);
    kernel::pv_tile_strips(kernel::in_pairs(p16_.data()), ldp_, p, lds, rows, kernel::in_pairs(vp), cols, o, ldo, dvp_);
  }

 private:
  std::size_t kv_len_ = 0, dv_ = 0, bk_ = 0, dvp_ = 0, ldp_ = 0;
  head_blocks<bfloat16> blocks_;
  kernel::aligned_vector<bfloat16> p16_;
};

}  // namespace xattn
