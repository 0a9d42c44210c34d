#pragma once
// The backward's tiles of a score computed pair by pair: a combine policy on its features, or a
// policy with operator() alone on the raw rows. The score of each pair is recomputed (keeping the
// values a saving policy's combine_backward reuses), and dS goes back pair by pair through the
// policy's analytic combine_backward, or through its generic code on the tape: on lanes of keys
// (pair_lanes.hpp) when it runs on them, else one pair at a time. The per-pair parameters'
// gradients are kept per task, summed later in task order.
#include "../../../kernel/aligned.hpp"
#include "../../../kernel/trace.hpp"
#include "../../../layout.hpp"
#include "../../../policy/gradient.hpp"
#include "../../operands/tile_rows.hpp"
#include "../../plan/schedule.hpp"

#include <algorithm>
#include <span>
#include <vector>

namespace xattn {

template <class Acc, class P>
class pair_grads {
  // a policy that keeps per-pair values from the recomputed score for its backward
  static constexpr bool saves = combines_saved_in<P, Acc>;
  // a policy differentiated automatically runs its per-pair code on lanes of keys (var_lanes)
  static constexpr bool lanes = !saves && pairs_in_lanes<P, Acc>();

 public:
  /// Query rows of n features and key rows of nk (equal, except for raw rows).
  pair_grads(const P& policy, std::size_t n, std::size_t nk, const backward_schedule& bs)
      : policy_(policy),
        n_(n),
        nk_(nk),
        np_(simd::padded<Acc>(n)),
        nkp_(simd::padded<Acc>(nk)),
        bk_(bs.block_k),
        slots_(automatic_slots(policy)),
        q_(bs.block_q * np_),
        kr_(bk_ * nkp_),
        dk_(bk_ * nkp_),
        dparams_(combine_parameter_count(policy)) {
    if constexpr (saves) {
      saved_n_ = policy.combine_saved_size(n);
      saved_ld_ = simd::padded<Acc>(saved_n_);
      saved_.assign(bs.block_q * bk_ * saved_ld_, Acc(0));
    }
  }

  std::size_t parameters() const noexcept { return dparams_.size(); }

  /// Key rows [j0, j0 + cols) of head (b, hk) of view k copied contiguous; their gradient and the
  /// task's parameter gradients zeroed.
  template <class View>
  void load_keys(const View& k, std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
    for (std::size_t c = 0; c < cols; ++c)
      kernel::scaled_copy(k.row(b, hk, j0 + c), k.inner_stride(), nk_, Acc(1), kr_.data() + c * nkp_, 1);
    std::fill(dk_.begin(), dk_.end(), Acc(0));
  }
  void begin_task() { std::fill(dparams_.begin(), dparams_.end(), Acc(0)); }

  /// Query rows [i0, i0 + rows) of head (b, h) of view q.
  template <class View>
  void load_queries(const View& q, std::size_t b, std::size_t h, std::size_t i0, std::size_t rows) {
    std::tie(q_rows_, ldq_) = tile_rows(q, b, h, i0, rows, n_, np_, q_.data());
    rows_ = rows;
  }

  /// s[r, c] = the pair's score, for the tile's rows and keys c < cols (every pair: no ranges).
  template <class Range>
  void scores(std::size_t cols, std::size_t, Acc* s, std::size_t lds, Range) {
    kernel::trace::note(kernel::tile_op{kernel::operation::pair_scores});
    for (std::size_t r = 0; r < rows_; ++r) {
      const std::span<const Acc> fq(q_rows_ + r * ldq_, n_);
      for (std::size_t c = 0; c < cols; ++c) {
        const std::span<const Acc> fk(kr_.data() + c * nkp_, nk_);
        if constexpr (saves)
          s[r * lds + c] = Acc(policy_.combine_saving(fq, fk, saved(r, c)));
        else
          s[r * lds + c] = Acc(pair_code(policy_)(fq, fk));
      }
    }
  }

  /// dq[r] += Σ_c dS[r, c] · ∂s/∂fq, the key block's gradient += dS[r, c] · ∂s/∂fk, and the
  /// per-pair parameters' gradients, for the tile's rows and keys c < cols (dq's rows np apart;
  /// a dS of 0 is skipped, so no ranges are needed).
  template <class RowRange, class KeyRange>
  void gradients(const Acc* ds, std::size_t lds, std::size_t cols, Acc* dq, RowRange, KeyRange) {
    kernel::trace::note(kernel::tile_op{kernel::operation::pair_gradients});
    for (std::size_t r = 0; r < rows_; ++r) {
      const std::span<const Acc> fq(q_rows_ + r * ldq_, n_);
      const std::span<Acc> dfq(dq + r * np_, n_);
      const auto one_pair = [&](std::size_t c) {
        const Acc g = ds[r * lds + c];
        if (g == Acc(0)) return;
        const std::span<Acc> dfk(dk_.data() + c * nkp_, nk_);
        if constexpr (saves)
          policy_.combine_backward_saved(std::span<const Acc>(saved(r, c)), g, dfq, dfk, std::span<Acc>(dparams_));
        else
          pair_backward(policy_, fq, std::span<const Acc>(kr_.data() + c * nkp_, nk_), g, dfq, dfk, slots_,
                        std::span<Acc>(dparams_));
      };
      if constexpr (lanes) {
        const auto row = [&](Acc* base) { return [this, base](std::size_t c) { return base + c * nkp_; }; };
        pair_backward_row(pair_code(policy_), fq, row(kr_.data()), row(dk_.data()), nk_, ds + r * lds, cols, dfq,
                          slots_, std::span<Acc>(dparams_), one_pair);
      } else {
        for (std::size_t c = 0; c < cols; ++c) one_pair(c);
      }
    }
  }

  /// The key block's gradient rows into view dk at rows [j0, j0 + cols) of head (b, hk).
  void store_keys(const strided_view<Acc>& dk, std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) const {
    for (std::size_t c = 0; c < cols; ++c)
      kernel::scaled_copy(dk_.data() + c * nkp_, 1, nk_, Acc(1), dk.row(b, hk, j0 + c), dk.inner_stride());
  }
  /// The task's parameter gradients into `to` (parameters() of them).
  void store_parameters(Acc* to) const { std::copy(dparams_.begin(), dparams_.end(), to); }

 private:
  /// The values a saving policy kept for pair (row r, key c) of the current tile.
  std::span<Acc> saved(std::size_t r, std::size_t c) { return {saved_.data() + (r * bk_ + c) * saved_ld_, saved_n_}; }

  const P& policy_;
  std::size_t n_, nk_, np_, nkp_, bk_;
  parameter_slots slots_;              // the learnables the tape differentiates (automatic_slots)
  kernel::aligned_vector<Acc> q_;      // the query rows, when not read in place
  kernel::aligned_vector<Acc> kr_;     // the key block's rows, nkp_ apart
  kernel::aligned_vector<Acc> dk_;     // their gradient
  std::vector<Acc> dparams_;           // this task's gradient at the per-pair parameters
  kernel::aligned_vector<Acc> saved_;  // a saving policy's values, saved_ld_ per pair of the tile
  std::size_t saved_n_ = 0, saved_ld_ = 0;
  const Acc* q_rows_ = nullptr;
  std::size_t ldq_ = 0, rows_ = 0;
};

}  // namespace xattn
