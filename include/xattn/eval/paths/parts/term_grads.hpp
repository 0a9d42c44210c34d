#pragma once
// A policy's additive terms in the backward: score = ... + α_i + β_j. Per key block the block's β
// and the gradient at them (dS's column sums); per query block α and the gradient at them (dS's
// row sums, added into the query block's rows of a chunk's partial).
#include "../../../kernel/aligned.hpp"
#include "../../../kernel/backward.hpp"
#include "../../operands/features.hpp"
#include "../../plan/schedule.hpp"

#include <algorithm>

namespace xattn {

template <class Acc>
class term_grads {
 public:
  explicit term_grads(const backward_schedule& bs)
      : beta_(simd::padded<Acc>(bs.block_k)), dbeta_(simd::padded<Acc>(bs.block_k)) {}

  /// The terms of keys [j0, j0 + cols) of head (b, hk), zero-padded to whole batches; their
  /// gradient zeroed.
  void load_keys(const row_features<Acc>& fk, std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
    const Acc* beta = &fk.term_of(b, hk, j0);
    std::copy(beta, beta + cols, beta_.begin());
    std::fill(beta_.begin() + std::ptrdiff_t(cols), beta_.end(), Acc(0));
    std::fill(dbeta_.begin(), dbeta_.end(), Acc(0));
  }

  /// The terms of queries [i0, ...) of head (b, h).
  void load_queries(const row_features<Acc>& fq, std::size_t b, std::size_t h, std::size_t i0) {
    alpha_ = &fq.term_of(b, h, i0);
  }

  /// s[r, :] += α_r + β for rows r < rows (cols_padded columns).
  void add(Acc* s, std::size_t lds, std::size_t rows, std::size_t cols_padded) const {
    for (std::size_t r = 0; r < rows; ++r) kernel::add_terms_row(s + r * lds, cols_padded, alpha_[r], beta_.data());
  }

  /// dβ += dS's column sums, dalpha[r] += row r's sum, for rows r < rows (dS is 0 past the keys).
  void gradients(const Acc* ds, std::size_t lds, std::size_t rows, std::size_t cols_padded, Acc* dalpha) {
    for (std::size_t r = 0; r < rows; ++r)
      dalpha[r] += kernel::accumulate_row(ds + r * lds, cols_padded, dbeta_.data());
  }

  /// The key block's dβ into dfk's terms.
  void store_keys(row_features<Acc>& dfk, std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) const {
    std::copy(dbeta_.begin(), dbeta_.begin() + std::ptrdiff_t(cols), &dfk.term_of(b, hk, j0));
  }

 private:
  kernel::aligned_vector<Acc> beta_, dbeta_;  // this key block's β and their gradient, whole batches
  const Acc* alpha_ = nullptr;                // this query block's α
};

}  // namespace xattn
