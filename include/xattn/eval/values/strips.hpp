#pragma once
// V packed in strips (kernel::pack_strips) once per head and thread, converted to the accumulator
// type: every query block of a head then reads the same copy, still in that core's L2
// (head_blocks). The forward's way for long sequences; decoding reads each value once, so there
// the copy would double the bytes read.
#include "../../kernel/pack.hpp"
#include "../../kernel/pv.hpp"
#include "../../policy/problem.hpp"
#include "../../round_up.hpp"
#include "../operands/head_blocks.hpp"
#include "../operands/head_rows.hpp"

#include <algorithm>

namespace xattn {

template <class Acc>
class value_strips {
 public:
  static constexpr std::size_t sw = kernel::strip_width<Acc>;

  value_strips() = default;
  value_strips(const problem& pr, std::size_t bk) : kv_len_(pr.kv_len), dv_(pr.v_dim), bk_(bk) {}

  /// o[r, :] += p[r, :cols] · V[j0 : j0 + cols] for r < rows, V rows of head (b, hk) of the view vv.
  template <class View>
  void accumulate(const View& vv, std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols, const Acc* p,
                  std::size_t lds, std::size_t rows, Acc* o, std::size_t ldo) {
    const std::size_t dvp = simd::padded<Acc>(dv_);
    if (blocks_.empty()) blocks_ = head_blocks<Acc>((kv_len_ + bk_ - 1) / bk_, bk_ * round_up(dvp, sw));
    const Acc* v = blocks_.block(b, hk, j0 / bk_, [&](std::size_t kb, Acc* to) {
      const std::size_t k0 = kb * bk_;
      kernel::pack_strips<Acc>(rows_from(head_rows(vv, b, hk), k0), std::min(bk_, kv_len_ - k0), dv_, vv.inner_stride(),
                               to, bk_ * sw);
    });
    kernel::pv_tile_strips(p, lds, rows, v, bk_ * sw, cols, o, ldo, dvp);
  }

 private:
  std::size_t kv_len_ = 0, dv_ = 0, bk_ = 0;
  head_blocks<Acc> blocks_;  // allocated when first needed
};

}  // namespace xattn
