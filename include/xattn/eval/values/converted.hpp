#pragma once
// V rows converted to the accumulator type, zero-padded to whole batches, for the decoding rows
// that cannot read V in place: once per head and thread when V has another type (widened_per_head:
// every task of the head reads the copy), or per task when only its layout differs
// (copied_per_task: a copy per head would be as large as V itself).
#include "../../kernel/aligned.hpp"
#include "../../kernel/pv.hpp"
#include "../../kernel/rows.hpp"
#include "../../policy/problem.hpp"
#include "../operands/head_blocks.hpp"

#include <algorithm>

namespace xattn {

template <class Acc>
class values_converted {
 public:
  values_converted() = default;
  values_converted(const problem& pr, std::size_t bk, bool per_head)
      : kv_len_(pr.kv_len), dv_(pr.v_dim), dvp_(simd::padded<Acc>(pr.v_dim)), bk_(bk), per_head_(per_head) {}

  template <class View>
  void accumulate(const View& vv, std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols, const Acc* p,
                  std::size_t lds, std::size_t rows, Acc* o, std::size_t ldo) {
    const auto convert = [&](std::size_t k0, std::size_t n, Acc* to) {
      for (std::size_t c = 0; c < n; ++c) {
        Acc* dst = to + c * dvp_;
        kernel::scaled_copy(vv.row(b, hk, k0 + c), vv.inner_stride(), dv_, Acc(1), dst, 1);
        std::fill(dst + dv_, dst + dvp_, Acc(0));
      }
    };
    const Acc* v = nullptr;
    if (per_head_) {
      if (blocks_.empty()) blocks_ = head_blocks<Acc>((kv_len_ + bk_ - 1) / bk_, bk_ * dvp_);
      v = blocks_.block(b, hk, j0 / bk_,
                        [&](std::size_t kb, Acc* to) { convert(kb * bk_, std::min(bk_, kv_len_ - kb * bk_), to); });
    } else {
      if (task_.empty()) task_.resize(bk_ * dvp_);
      convert(j0, cols, task_.data());
      v = task_.data();
    }
    kernel::pv_tile_at(p, lds, rows, kernel::strided_rows<Acc>{v, std::ptrdiff_t(dvp_)}, cols, o, ldo, dvp_);
  }

 private:
  std::size_t kv_len_ = 0, dv_ = 0, dvp_ = 0, bk_ = 0;
  bool per_head_ = false;
  head_blocks<Acc> blocks_;           // widened_per_head: allocated when first needed
  kernel::aligned_vector<Acc> task_;  // copied_per_task
};

}  // namespace xattn
