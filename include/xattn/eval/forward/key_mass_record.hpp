#pragma once
// What the key-mass tap (eval_with_key_mass) keeps of one task: the online softmax turns each key
// block into probabilities relative to the running maximum of that moment, which later blocks may
// raise, so the record keeps each block's probabilities with that maximum. Once a row is finished,
// its final maximum and sum turn them into the row's softmax weights -- the score tile is never
// recomputed, and only rows x keys of the task are kept (decoding: a few rows).
#include "../../kernel/rows.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace xattn {

template <class Acc>
class key_mass_record {
 public:
  /// A task of `rows` rows over keys [k0, k0 + keys) in blocks of block_k: nothing recorded yet.
  void start(std::size_t rows, std::size_t k0, std::size_t keys, std::size_t block_k) {
    k0_ = k0, keys_ = keys, bk_ = block_k;
    blocks_ = (keys + block_k - 1) / block_k;
    if (p_.size() < rows * keys) p_.resize(rows * keys);
    seen_.assign(rows * blocks_, block{});
  }

  /// Row r's probabilities p[0, cols) for the keys [j0, j0 + cols) of a block, relative to the
  /// row's running maximum m (base 2) after that block.
  void record(std::size_t r, std::size_t j0, const Acc* p, std::size_t cols, Acc m) {
    std::copy(p, p + cols, p_.data() + r * keys_ + (j0 - k0_));
    seen_[r * blocks_ + (j0 - k0_) / bk_] = {m, cols};
  }

  /// Row r's softmax weights over the task's keys from its final state st (0 for keys no block
  /// recorded, and everywhere if the row saw no key): keys() values, in place of its record.
  const Acc* weights(std::size_t r, const kernel::row_state<Acc>& st) {
    Acc* w = p_.data() + r * keys_;
    for (std::size_t bi = 0; bi < blocks_; ++bi) {
      const block at = seen_[r * blocks_ + bi];
      const std::size_t j = bi * bk_, n = std::min(bk_, keys_ - j);
      const std::size_t cols = st.l == 0 ? 0 : at.cols;
      if (cols > 0) {
        const Acc f = std::exp2(at.m - st.m) / st.l;  // at.m = -inf (nothing visible yet): its p are 0
        for (std::size_t c = 0; c < cols; ++c) w[j + c] *= f;
      }
      std::fill(w + j + cols, w + j + n, Acc(0));
    }
    return w;
  }

  std::size_t keys() const noexcept { return keys_; }

 private:
  struct block {
    Acc m = 0;
    std::size_t cols = 0;  // 0: the row took no part in the block
  };
  std::size_t k0_ = 0, keys_ = 0, bk_ = 1, blocks_ = 0;
  std::vector<Acc> p_;  // rows x keys_
  std::vector<block> seen_;
};

}  // namespace xattn
