#pragma once
// One worker of the fused pass: for a (batch, query head, query block) it streams key blocks through
// score tile -> modifiers -> masks -> online softmax -> P·V, keeping only tiles of size
// block_q x block_k. Nothing of size Sq x Skv is ever allocated. The score path (Path::tiles)
// fills the score tile; the worker does not know which path it runs.
#include "../kernel/aligned.hpp"
#include "../kernel/blocking.hpp"
#include "../kernel/pv.hpp"
#include "../kernel/rows.hpp"
#include "../layout.hpp"
#include "../random/philox_dropout.hpp"
#include "key_panels.hpp"
#include "mask_eval.hpp"
#include "resolved_schedule.hpp"

#include <boost/hana.hpp>

#include <limits>
#include <vector>

namespace xattn {

/// The softmax runs in base 2. Without modifiers, and with masks that only exclude (fill -inf),
/// nothing needs natural units, so log2 e joins the scale (into the queries on the dot paths);
/// otherwise each row is converted after its modifiers and masks (a filled -1e6 scales too).
template <class Ops, class Masks>
bool folds_log2e(const Ops&, const Masks& masks) {
  bool excluding = true;
  hana::for_each(masks, [&](const auto& m) { excluding = excluding && std::isinf(fill_of(m)); });
  return decltype(hana::is_empty(std::declval<Ops>()))::value && excluding;
}

template <class Acc, class Path, class Plan, class Ops, class Masks>
class fused_worker {
 public:
  static constexpr std::size_t w = simd::width<Acc>;
  using keys_t = typename Path::keys;

  fused_worker(const Plan& p, const problem& pr, const Ops& ops, const Masks& masks, const keys_t& keys,
               const resolved_schedule& rs, bool fold_log2e)
      : p_(p),
        pr_(pr),
        ops_(ops),
        masks_(masks),
        tiles_(p.base, pr, keys, rs),
        bq_(rs.block_q),
        bk_(rs.block_k),
        lds_(tile_stride<Acc>(bk_)),
        dvp_(simd::padded<Acc>(pr.v_dim)),
        fold_log2e_(fold_log2e),
        sc_(Acc(p.scale * (fold_log2e ? kernel::log2e : 1.0))),
        s_(bq_ * lds_),
        o_(bq_ * dvp_),
        vb_(bk_ * dvp_),
        st_(bq_) {}

  /// Queries [i0, i0 + block_q) against keys [k0, k1) (block_k-aligned k0): the attention output
  /// rows into out and, when lse has data, each row's log-sum-exp.
  template <class Out>
  void run(std::size_t b, std::size_t h, std::size_t i0, std::size_t k0, std::size_t k1, const strided_view<Out>& out,
           const strided_view<Acc, 3>& lse) {
    const std::size_t rows = std::min(bq_, pr_.q_len - i0);
    start(b, h, i0, rows);
    std::fill(o_.begin(), o_.begin() + rows * dvp_, Acc(0));
    for (std::size_t j0 = k0; j0 < k1; j0 += bk_) {
      const part p = block_probabilities(b, h, i0, rows, j0, std::min(bk_, k1 - j0), true);
      if (p.cols == 0) continue;
      const auto [v_ptr, ldv] = values(b, kv_head(h), j0, p.cols);
      kernel::pv_tile(s_.data() + p.r0 * lds_, lds_, p.r1 - p.r0, v_ptr, ldv, p.cols, o_.data() + p.r0 * dvp_, dvp_,
                      dvp_);
    }
    for (std::size_t r = 0; r < rows; ++r) {
      kernel::finalize_row(o_.data() + r * dvp_, pr_.v_dim, st_[r].l, out.row(b, h, i0 + r), out.inner_stride());
      if (lse.data) lse(b, h, i0 + r) = kernel::row_lse(st_[r]);
    }
  }

  /// The softmax weights of queries [i0, i0 + block_q) against every key, into out (B, H, Sq, Skv):
  /// a first pass over the key blocks for each row's max and sum, a second writing normalised tiles.
  template <class Out>
  void run_weights(std::size_t b, std::size_t h, std::size_t i0, const strided_view<Out>& out) {
    const std::size_t rows = std::min(bq_, pr_.q_len - i0);
    start(b, h, i0, rows);
    for (std::size_t j0 = 0; j0 < pr_.kv_len; j0 += bk_)
      block_probabilities(b, h, i0, rows, j0, std::min(bk_, pr_.kv_len - j0), false);
    for (std::size_t j0 = 0; j0 < pr_.kv_len; j0 += bk_) {
      const std::size_t all = std::min(bk_, pr_.kv_len - j0);
      const part p = block_part(b, h, i0, rows, j0, all);
      if (p.cols > 0) block_scores(b, h, i0, p, j0);
      for (std::size_t r = 0; r < rows; ++r) {
        Acc* s = s_.data() + r * lds_;
        const std::size_t cols = r >= p.r0 && r < p.r1 ? p.cols : 0;
        if (cols > 0) {
          if (!fold_log2e_) kernel::to_base2_row(s, simd::padded<Acc>(cols));
          kernel::weights_row(s, simd::padded<Acc>(cols), st_[r]);
          if (p_.drop.p > 0)
            random::scale_row(p_.drop, std::uint32_t(b), std::uint32_t(h), std::uint32_t(i0 + r), std::uint32_t(j0),
                              cols, s);
        }
        std::fill(s + cols, s + all, Acc(0));  // hidden keys, and keys no row of the block can see
        write_row(s, all, out, b, h, i0 + r, j0);
      }
    }
  }

  /// The scores after modifiers and masks (natural units; -inf where excluded) of queries
  /// [i0, i0 + block_q) against every key, into out (B, H, Sq, Skv).
  template <class Out>
  void run_scores(std::size_t b, std::size_t h, std::size_t i0, const strided_view<Out>& out) {
    const std::size_t rows = std::min(bq_, pr_.q_len - i0);
    tiles_.load_queries(b, h, i0, rows, sc_);
    for (std::size_t j0 = 0; j0 < pr_.kv_len; j0 += bk_) {
      const std::size_t cols = std::min(bk_, pr_.kv_len - j0);
      const block_verdict v = classify_block(masks_, b, h, i0, i0 + rows, j0, j0 + cols);
      if (!v.skip) block_scores(b, h, i0, part{cols, 0, rows, v.all_visible}, j0);
      for (std::size_t r = 0; r < rows; ++r) {
        Acc* s = s_.data() + r * lds_;
        if (v.skip) std::fill(s, s + cols, -std::numeric_limits<Acc>::infinity());  // exclusion wins
        write_row(s, cols, out, b, h, i0 + r, j0);
      }
    }
  }

 private:
  std::size_t kv_head(std::size_t h) const { return h / (pr_.q_heads / pr_.kv_heads); }

  void start(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows) {
    tiles_.load_queries(b, h, i0, rows, sc_);
    std::fill(st_.begin(), st_.begin() + rows, kernel::row_state<Acc>{});
  }

  /// Whether a block adds exactly nothing: an excluding mask hides it, or a filling mask hides it
  /// and every row's running max is so far above the fill that 2^(fill - m) underflows to 0.
  bool skips(const block_verdict& v, std::size_t rows) const {
    if (v.skip) return true;
    if (!v.fill_hidden) return false;
    const double margin = std::is_same_v<Acc, float> ? 130 : 1100;
    for (std::size_t r = 0; r < rows; ++r)
      if (!(double(st_[r].m) > v.fill_max * kernel::log2e + margin)) return false;
    return true;
  }

  /// The part of key block [j0, j0 + all) that takes part for rows [i0, i0 + rows): its columns
  /// (0: skipped: the block adds exactly nothing) and the rows [r0, r1) some key of it is visible
  /// to (the rest see nothing in it).
  struct part {
    std::size_t cols = 0, r0 = 0, r1 = 0;
    bool all_visible = true;
  };
  part block_part(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t j0,
                  std::size_t all) const {
    const block_verdict v = classify_block(masks_, b, h, i0, i0 + rows, j0, j0 + all);
    if (skips(v, rows)) return {};
    if (v.all_visible) return {all, 0, rows, true};
    const std::size_t cols = visible_cols(masks_, b, h, i0, i0 + rows, j0, all);
    if (cols == 0) return {};
    const auto [r0, r1] = visible_rows(masks_, b, h, i0, rows, j0, j0 + cols, kernel::blocking<Acc>::rows);
    if (r0 == r1) return {};
    return {cols, r0, r1, false};
  }

  /// The score tile of key block [j0, j0 + cols) for rows [p.r0, p.r1), with modifiers and masks
  /// applied (masks only if some mask hides something in it), in natural units unless log2 e is
  /// folded into the scale.
  void block_scores(std::size_t b, std::size_t h, std::size_t i0, const part& p, std::size_t j0) {
    tiles_.scores(b, h, kv_head(h), i0 + p.r0, p.r1 - p.r0, j0, p.cols, simd::padded<Acc>(p.cols),
                  s_.data() + p.r0 * lds_, lds_);
    for (std::size_t r = p.r0; r < p.r1; ++r) {
      Acc* s = s_.data() + r * lds_;
      apply_ops(s, p.cols, b, h, i0 + r, j0);
      if (!p.all_visible) apply_masks(masks_, s, p.cols, b, h, i0 + r, j0);
    }
  }

  /// Scores of one key block turned into probabilities relative to each row's running max, the
  /// rows' states updated (and, for the attention output, the accumulators rescaled and the
  /// probabilities dropped out). Returns the part that takes part (cols 0: skipped).
  part block_probabilities(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t j0,
                           std::size_t all, bool to_output) {
    const part p = block_part(b, h, i0, rows, j0, all);
    if (p.cols == 0) return p;
    const std::size_t colsp = simd::padded<Acc>(p.cols);
    block_scores(b, h, i0, p, j0);
    for (std::size_t r = p.r0; r < p.r1; ++r) {
      Acc* s = s_.data() + r * lds_;
      if (!fold_log2e_) kernel::to_base2_row(s, colsp);  // padding is overwritten next
      std::fill(s + p.cols, s + colsp, -std::numeric_limits<Acc>::infinity());
      kernel::online_softmax_row(s, colsp, st_[r], to_output ? o_.data() + r * dvp_ : nullptr, dvp_);
      if (to_output && p_.drop.p > 0)  // after the running sum: dropout rescales what reaches V, not the normaliser
        random::scale_row(p_.drop, std::uint32_t(b), std::uint32_t(h), std::uint32_t(i0 + r), std::uint32_t(j0), p.cols,
                          s);
    }
    return p;
  }

  void apply_ops(Acc* s, std::size_t cols, std::size_t b, std::size_t h, std::size_t i, std::size_t j0) const {
    hana::for_each(ops_, [&](const auto& op) {
      if constexpr (has_apply_row<std::decay_t<decltype(op)>, Acc>)
        op.apply_row(s, cols, b, h, i, j0);
      else
        for (std::size_t c = 0; c < cols; ++c) s[c] = Acc(op(s[c], b, h, i, j0 + c));
    });
  }

  /// V rows of the key block: in place when they hold Acc, contiguous and batch-aligned; else
  /// converted into a zero-padded tile.
  std::pair<const Acc*, std::size_t> values(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
    const auto& vv = p_.v.view;
    using V = std::remove_cv_t<std::remove_pointer_t<decltype(vv.data)>>;
    if constexpr (std::is_same_v<V, Acc>)
      if (vv.inner_stride() == 1 && pr_.v_dim % w == 0 && vv.at.stride[2] >= std::ptrdiff_t(pr_.v_dim))
        return {vv.row(b, hk, j0), std::size_t(vv.at.stride[2])};
    for (std::size_t c = 0; c < cols; ++c) {
      Acc* dst = vb_.data() + c * dvp_;
      kernel::scaled_copy(vv.row(b, hk, j0 + c), vv.inner_stride(), pr_.v_dim, Acc(1), dst, 1);
      std::fill(dst + pr_.v_dim, dst + dvp_, Acc(0));
    }
    return {vb_.data(), dvp_};
  }

  template <class Out>
  static void write_row(const Acc* s, std::size_t n, const strided_view<Out>& out, std::size_t b, std::size_t h,
                        std::size_t i, std::size_t j0) {
    const std::ptrdiff_t st = out.inner_stride();
    kernel::scaled_copy(s, 1, n, Acc(1), out.row(b, h, i) + std::ptrdiff_t(j0) * st, st);
  }

  const Plan& p_;
  const problem& pr_;
  const Ops& ops_;
  const Masks& masks_;
  typename Path::tiles tiles_;
  std::size_t bq_, bk_, lds_, dvp_;
  bool fold_log2e_;
  Acc sc_;  // the expression's scale, times log2 e when folded
  kernel::aligned_vector<Acc> s_, o_, vb_;
  std::vector<kernel::row_state<Acc>> st_;
};

}  // namespace xattn
