#pragma once
// One worker of the fused pass: for a (batch, query head, query block) it streams key blocks through
// score tile -> modifiers -> masks -> online softmax -> P·V, keeping only tiles of size
// block_q x block_k. Nothing of size Sq x Skv is ever allocated.
#include "../kernel/tile_ops.hpp"
#include "../schedule.hpp"
#include "features.hpp"
#include "key_panels.hpp"
#include "lse_target.hpp"
#include "mask_eval.hpp"

#include <boost/hana.hpp>

#include <limits>
#include <span>
#include <vector>

namespace xattn {

template <class T, score_path Path, class Plan, class Ops, class Masks>
class fused_worker {
 public:
  static constexpr std::size_t w = simd::width<T>;

  fused_worker(const Plan& p, const problem& pr, const Ops& ops, const Masks& masks, const key_features<T>& kf,
               const key_panels<T>& panels, std::size_t n, const schedule& sch, strided4<T> out, lse_target<T> lse)
      : p_(p), pr_(pr), ops_(ops), masks_(masks), kf_(kf), panels_(panels), n_(n), bq_(sch.block_q),
        bk_(simd::padded<T>(sch.block_k)), lds_(tile_stride<T>(bk_)), dvp_(simd::padded<T>(pr.v_dim)), out_(out), lse_(lse) {
    // The softmax runs in base 2. Without modifiers, and with masks that only exclude (fill -inf),
    // nothing needs natural units, so log2 e joins the scale (into the queries on the dot paths);
    // otherwise each row is converted after its modifiers and masks (a filled -1e6 scales too).
    bool excluding = true;
    hana::for_each(masks, [&](const auto& m) { excluding = excluding && std::isinf(fill_of(m)); });
    fold_log2e_ = decltype(hana::is_empty(ops))::value && excluding;
    sc_ = T(p.scale * (fold_log2e_ ? kernel::log2e : 1.0));
    const std::size_t qn = Path == score_path::pair_raw ? pr.q_dim : n;
    qf_.resize(bq_ * std::max<std::size_t>(qn, 1));
    qraw_.resize(std::max<std::size_t>(pr.q_dim, 1));
    alpha_.resize(bq_);
    s_.resize(bq_ * lds_);
    o_.resize(bq_ * dvp_);
    vb_.resize(bk_ * dvp_);
    st_.resize(bq_);
  }

  /// Queries [i0, i0 + block_q) against all keys, into the evaluation's output.
  void run(std::size_t b, std::size_t h, std::size_t i0) { run(b, h, i0, 0, pr_.kv_len, out_, lse_); }

  /// Against keys [k0, k1) only (block_k-aligned k0), into the given output and lse targets.
  void run(std::size_t b, std::size_t h, std::size_t i0, std::size_t k0, std::size_t k1, const strided4<T>& out,
           const lse_target<T>& lse) {
    const std::size_t rows = std::min(bq_, pr_.q_len - i0);
    const std::size_t hk = h / (pr_.q_heads / pr_.kv_heads);
    load_queries(b, h, i0, rows);
    std::fill(o_.begin(), o_.begin() + rows * dvp_, T(0));
    std::fill(st_.begin(), st_.begin() + rows, kernel::row_state<T>{});
    for (std::size_t j0 = k0; j0 < k1; j0 += bk_) {
      std::size_t cols = std::min(bk_, k1 - j0);
      const block_verdict v = classify_block(masks_, b, h, i0, i0 + rows, j0, j0 + cols);
      if (v.skip || (v.fill_hidden && all_rows_above(rows, v.fill_max))) continue;
      if (!v.all_visible && (cols = visible_cols(masks_, b, h, i0, i0 + rows, j0, cols)) == 0) continue;
      const std::size_t colsp = simd::padded<T>(cols);
      scores(b, h, hk, i0, rows, j0, cols, colsp);
      for (std::size_t r = 0; r < rows; ++r) {
        T* s = s_.data() + r * lds_;
        apply_ops(s, cols, b, h, i0 + r, j0);
        if (!v.all_visible) apply_masks(masks_, s, cols, b, h, i0 + r, j0);
        if (!fold_log2e_) kernel::to_base2_row(s, colsp);  // padding is overwritten next
        std::fill(s + cols, s + colsp, -std::numeric_limits<T>::infinity());
        kernel::online_softmax_row(s, colsp, st_[r], o_.data() + r * dvp_, dvp_);
        if (p_.drop.p > 0)  // after the running sum: dropout rescales what reaches V, not the normaliser
          random::scale_row(p_.drop, std::uint32_t(b), std::uint32_t(h), std::uint32_t(i0 + r), std::uint32_t(j0), cols, s);
      }
      const auto [v_ptr, ldv] = values(b, hk, j0, cols);
      kernel::pv_tile(s_.data(), lds_, rows, v_ptr, ldv, cols, o_.data(), dvp_, dvp_);
    }
    for (std::size_t r = 0; r < rows; ++r) {
      kernel::finalize_row(o_.data() + r * dvp_, pr_.v_dim, st_[r].l, out.mutable_row(b, h, i0 + r), out.strides[3]);
      if (lse.data) lse.at(b, h, i0 + r) = kernel::row_lse(st_[r]);
    }
  }

 private:
  bool all_rows_above(std::size_t rows, double fill) const {
    // 2^(fill - m) underflows to exactly 0 beyond this margin (base 2), so such a block adds nothing.
    const double margin = std::is_same_v<T, float> ? 130 : 1100;
    for (std::size_t r = 0; r < rows; ++r)
      if (!(double(st_[r].m) > fill * kernel::log2e + margin)) return false;
    return true;
  }

  void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows) {
    const auto& q = p_.base;
    if constexpr (Path == score_path::tensor) {
      return;
    } else {
      const auto& qv = q.q.view;
      const T sc = sc_;
      for (std::size_t r = 0; r < rows; ++r) {
        const T* src = qv.row(b, h, i0 + r);
        T* dst = qf_.data() + r * qwidth();
        // The dot paths fold the scale into the queries.
        if constexpr (Path == score_path::dot_identity) {
          kernel::scaled_copy(src, qv.strides[3], pr_.q_dim, sc, dst, 1);
          alpha_[r] = 0;
        } else if constexpr (Path == score_path::pair_raw) {
          gather_row(src, qv.strides[3], pr_.q_dim, dst);
          alpha_[r] = 0;
        } else {
          gather_row(src, qv.strides[3], pr_.q_dim, qraw_.data());
          alpha_[r] = q.policy.project_query(std::span<const T>(qraw_), std::span<T>(dst, n_));
          if constexpr (Path == score_path::dot_features) {
            kernel::scaled_copy(dst, 1, n_, sc, dst, 1);
            alpha_[r] *= sc;
          }
        }
      }
    }
  }

  std::size_t qwidth() const { return Path == score_path::pair_raw ? pr_.q_dim : n_; }

  void scores(std::size_t b, std::size_t h, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
              std::size_t cols, std::size_t colsp) {
    const T sc = sc_;
    if constexpr (Path == score_path::dot_identity || Path == score_path::dot_features) {
      if (!panels_.empty()) {
        kernel::qk_tile(qf_.data(), n_, rows, panels_.panel(b, hk, j0 / bk_), n_, colsp, s_.data(), lds_);
      } else if constexpr (Path == score_path::dot_identity) {
        const auto& kv = p_.base.k.view;
        kernel::qk_direct(qf_.data(), n_, rows, [&](std::size_t c) { return kv.row(b, hk, j0 + c); }, cols, n_, s_.data(), lds_);
      } else {
        kernel::qk_direct(qf_.data(), n_, rows, [&](std::size_t c) { return kf_.row(b, hk, j0 + c); }, cols, n_, s_.data(), lds_);
      }
      if constexpr (Path == score_path::dot_features) {
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < cols; ++c) s_[r * lds_ + c] += alpha_[r] + sc * kf_.term(b, hk, j0 + c);
      }
    } else if constexpr (Path == score_path::tensor) {
      const auto& xv = p_.base.x.view;
      for (std::size_t r = 0; r < rows; ++r) {
        const T* src = xv.row(b, h, i0 + r);
        for (std::size_t c = 0; c < cols; ++c) s_[r * lds_ + c] = sc * src[std::ptrdiff_t(j0 + c) * xv.strides[3]];
      }
    } else {
      const std::size_t qn = qwidth();
      for (std::size_t r = 0; r < rows; ++r) {
        const std::span<const T> fq(qf_.data() + r * qn, qn);
        for (std::size_t c = 0; c < cols; ++c) {
          const std::span<const T> fk(kf_.row(b, hk, j0 + c), n_);
          T v;
          if constexpr (Path == score_path::pair_features)
            v = p_.base.policy.combine(fq, fk) + alpha_[r] + kf_.term(b, hk, j0 + c);
          else
            v = T(p_.base.policy(fq, fk));
          s_[r * lds_ + c] = sc * v;
        }
      }
    }
  }

  void apply_ops(T* s, std::size_t cols, std::size_t b, std::size_t h, std::size_t i, std::size_t j0) const {
    hana::for_each(ops_, [&](const auto& op) {
      if constexpr (decltype(caps::has_apply_row(op))::value)
        op.apply_row(s, cols, b, h, i, j0);
      else
        for (std::size_t c = 0; c < cols; ++c) s[c] = T(op(s[c], b, h, i, j0 + c));
    });
  }

  /// V rows of the key block: in place when contiguous and batch-aligned, else packed and zero-padded.
  std::pair<const T*, std::size_t> values(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
    const auto& vv = p_.v.view;
    if (vv.strides[3] == 1 && pr_.v_dim % w == 0 && vv.strides[2] >= std::ptrdiff_t(pr_.v_dim))
      return {vv.row(b, hk, j0), std::size_t(vv.strides[2])};
    for (std::size_t c = 0; c < cols; ++c) {
      T* dst = vb_.data() + c * dvp_;
      gather_row(vv.row(b, hk, j0 + c), vv.strides[3], pr_.v_dim, dst);
      std::fill(dst + pr_.v_dim, dst + dvp_, T(0));
    }
    return {vb_.data(), dvp_};
  }

  const Plan& p_;
  const problem& pr_;
  const Ops& ops_;
  const Masks& masks_;
  const key_features<T>& kf_;
  const key_panels<T>& panels_;
  std::size_t n_, bq_, bk_, lds_, dvp_;
  bool fold_log2e_ = false;
  T sc_ = 1;  // the expression's scale, times log2 e when folded
  strided4<T> out_;
  lse_target<T> lse_;
  std::vector<T> qf_, qraw_, alpha_, s_, o_, vb_;
  std::vector<kernel::row_state<T>> st_;
};

}  // namespace xattn
