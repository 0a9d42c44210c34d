#pragma once
// One thread's backward work: a task is (batch, key head, key chunk). For each key block of the
// chunk it packs K and V once, then walks every query block of every query head that reads this
// key head, recomputing P from the saved log-sum-exp (FlashAttention-2):
//   S = scale·Q·Kᵀ (then modifiers, masks)   P = e^(S − lse)        dV += Zᵀ·dO   (Z: P after dropout)
//   dP = dO·Vᵀ (dropout: × keep/(1−p))       dS = P ∘ (dP − Δ)      dK += scale·dSᵀ·Q
//   dQ_chunk += scale·dS·K
// dK and dV of the key block stay in this worker until every query has been seen (no races); dQ
// goes to the chunk's own partial, summed in chunk order afterwards. Filled and excluded scores
// are constants (dS = 0 there); modifiers are differentiated on dual numbers.
#include "../dual.hpp"
#include "../kernel/aligned.hpp"
#include "../kernel/backward.hpp"
#include "../kernel/pack.hpp"
#include "../kernel/pv.hpp"
#include "../kernel/qk.hpp"
#include "../random/philox_dropout.hpp"
#include "mask_eval.hpp"
#include "resolved_schedule.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <vector>

namespace xattn {

/// Where the backward reads and writes, in kernel coordinates.
template <class Acc, class DO, std::size_t NOps>
struct backward_io {
  strided_view<const DO> d_out;            // (B, Hq, Sq, Dv)
  const Acc* shift = nullptr;              // (B, Hq, Sq) row-major: P = e^(S - shift - rel) (see probs_row);
  const Acc* rel = nullptr;                //   shift = -inf: the row sees no key
  const Acc* delta = nullptr;              // (B, Hq, Sq) row-major: rowsum(dO ∘ O)
  Acc* dq_part = nullptr;                  // (chunks, B, Hq, Sq, dq_pad)
  Acc* row_sums = nullptr;                 // (chunks, B, Hq, Sq): Σ P, 1 per row when lse is this expression's
  strided_view<Acc> dk, dv;                // (B, Hkv, Skv, Dk), (B, Hkv, Skv, Dv)
  strided_view<Acc> dx;                    // tensor scores: (B, Hq, Sq, Skv)
  std::array<Acc*, NOps + 1> bias_full{};  // per modifier: (B, Hq, Sq, Skv) row-major gradient at a bias, or null
};

template <class Acc, class Plan, class Ops, class Masks, class IO>
class backward_worker {
  using base_t = decltype(std::declval<Plan>().base);
  static constexpr bool tensor_scores = base_t::tensor_scores;
  static constexpr std::size_t n_ops = decltype(hana::length(std::declval<Ops>()))::value;
  static constexpr Acc ninf = -std::numeric_limits<Acc>::infinity();

 public:
  backward_worker(const Plan& p, const problem& pr, const Ops& ops, const Masks& masks, const backward_schedule& bs,
                  const IO& io)
      : p_(p), pr_(pr), ops_(ops), masks_(masks), bs_(bs), io_(io) {
    bq_ = bs.block_q;
    lds_ = simd::padded<Acc>(bs.block_k);
    dqp_ = simd::padded<Acc>(pr.q_dim);
    dvp_ = simd::padded<Acc>(pr.v_dim);
    const std::size_t bk = bs.block_k;
    q_.assign(bq_ * dqp_, Acc(0));
    do_.assign(bq_ * dvp_, Acc(0));
    s_.assign(bq_ * lds_, Acc(0));
    dp_.assign(bq_ * lds_, Acc(0));
    if constexpr (n_ops > 0) s0_.assign(bq_ * lds_, Acc(0));
    vis_.assign(bq_ * lds_, Acc(0));
    z_.assign(bq_ * lds_, Acc(0));
    kp_.assign(kernel::packed_kt_size<Acc>(bk, std::max<std::size_t>(pr.q_dim, 1)), Acc(0));
    vp_.assign(kernel::packed_kt_size<Acc>(bk, std::max<std::size_t>(pr.v_dim, 1)), Acc(0));
    kr_.assign(bk * dqp_, Acc(0));
    dk_.assign(bk * dqp_, Acc(0));
    dv_.assign(bk * dvp_, Acc(0));
    dead_.assign(bq_, 0);
    partial_.assign(bq_, 0);
  }

  /// Task (b, hk, chunk): keys [chunk · chunk_keys, ...) of key head hk, every query head of its group.
  void run(std::size_t b, std::size_t hk, std::size_t chunk) {
    const std::size_t c0 = chunk * bs_.chunk_keys, c1 = std::min(pr_.kv_len, c0 + bs_.chunk_keys);
    for (std::size_t j0 = c0; j0 < c1; j0 += bs_.block_k) key_block(b, hk, chunk, j0, std::min(bs_.block_k, c1 - j0));
  }

 private:
  void key_block(std::size_t b, std::size_t hk, std::size_t chunk, std::size_t j0, std::size_t cols) {
    const std::size_t group = pr_.q_heads / pr_.kv_heads;
    const auto& v = p_.v.view;
    kernel::pack_kt<Acc>([&](std::size_t c) { return v.row(b, hk, j0 + c); }, cols, pr_.v_dim, v.inner_stride(),
                         vp_.data());
    if constexpr (!tensor_scores) {
      const auto& k = p_.base.k.view;
      kernel::pack_kt<Acc>([&](std::size_t c) { return k.row(b, hk, j0 + c); }, cols, pr_.q_dim, k.inner_stride(),
                           kp_.data());
      for (std::size_t c = 0; c < cols; ++c)
        kernel::scaled_copy(k.row(b, hk, j0 + c), k.inner_stride(), pr_.q_dim, Acc(1), kr_.data() + c * dqp_, 1);
      std::fill(dk_.begin(), dk_.end(), Acc(0));
    }
    std::fill(dv_.begin(), dv_.end(), Acc(0));
    for (std::size_t h = hk * group; h < (hk + 1) * group; ++h)
      for (std::size_t i0 = 0; i0 < pr_.q_len; i0 += bq_) {
        const std::size_t rows = std::min(bq_, pr_.q_len - i0);
        const block_verdict vd = classify_block(masks_, b, h, i0, i0 + rows, j0, j0 + cols);
        if (vd.skip) continue;
        query_block(b, h, chunk, i0, rows, j0, cols, vd.all_visible);
      }
    for (std::size_t c = 0; c < cols; ++c) {
      kernel::scaled_copy(dv_.data() + c * dvp_, 1, pr_.v_dim, Acc(1), io_.dv.row(b, hk, j0 + c),
                          io_.dv.inner_stride());
      if constexpr (!tensor_scores)
        kernel::scaled_copy(dk_.data() + c * dqp_, 1, pr_.q_dim, Acc(1), io_.dk.row(b, hk, j0 + c),
                            io_.dk.inner_stride());
    }
  }

  /// Rows [i0, i0 + rows) of view x (n elements each) as the microkernels read them: in place when
  /// they are contiguous Acc rows of whole batches (reading the padding would leave the row), else
  /// copied into buf (np apart, padding zero). Returns the first row and the distance between rows.
  template <class View>
  std::pair<const Acc*, std::size_t> rows_of(const View& x, std::size_t b, std::size_t h, std::size_t i0,
                                             std::size_t rows, std::size_t n, std::size_t np, Acc* buf) const {
    using E = std::remove_cv_t<std::remove_reference_t<decltype(*x.data)>>;
    if constexpr (std::is_same_v<E, Acc>)
      if (x.inner_stride() == 1 && n == np && x.at.stride[2] > 0) return {x.row(b, h, i0), std::size_t(x.at.stride[2])};
    for (std::size_t r = 0; r < rows; ++r)
      kernel::scaled_copy(x.row(b, h, i0 + r), x.inner_stride(), n, Acc(1), buf + r * np, 1);
    return {buf, np};
  }

  /// The score of (i, j0 + c) before modifiers: scale · (Q·Kᵀ or X).
  void scores(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t j0, std::size_t cols) {
    const std::size_t colsp = simd::padded<Acc>(cols);
    const Acc scale = Acc(p_.scale);
    if constexpr (tensor_scores) {
      const auto& x = p_.base.x.view;
      for (std::size_t r = 0; r < rows; ++r)
        kernel::scaled_copy(&x(b, h, i0 + r, j0), x.inner_stride(), cols, scale, s_.data() + r * lds_, 1);
    } else {
      std::tie(q_rows_, ldq_) = rows_of(p_.base.q.view, b, h, i0, rows, pr_.q_dim, dqp_, q_.data());
      kernel::qk_tile(q_rows_, ldq_, rows, kp_.data(), pr_.q_dim, colsp, s_.data(), lds_);
      for (std::size_t r = 0; r < rows; ++r) kernel::scale_row(s_.data() + r * lds_, colsp, scale);
    }
  }

  void query_block(std::size_t b, std::size_t h, std::size_t chunk, std::size_t i0, std::size_t rows, std::size_t j0,
                   std::size_t cols, bool all_visible) {
    const std::size_t colsp = simd::padded<Acc>(cols);
    const std::size_t row0 = (b * pr_.q_heads + h) * pr_.q_len + i0;  // (B, Hq, Sq) row-major index
    const std::size_t rows_total = pr_.batch * pr_.q_heads * pr_.q_len;
    scores(b, h, i0, rows, j0, cols);
    for (std::size_t r = 0; r < rows; ++r) {
      Acc* s = s_.data() + r * lds_;
      const std::size_t i = i0 + r;
      if constexpr (n_ops > 0) {
        std::copy(s, s + cols, s0_.data() + r * lds_);
        for (std::size_t c = 0; c < cols; ++c) s[c] = through_ops(s[c], b, h, i, j0 + c, nullptr);
      }
      partial_[r] = !all_visible;
      if (!all_visible) {
        Acc* vis = vis_.data() + r * lds_;
        std::fill(vis, vis + cols, std::numeric_limits<Acc>::quiet_NaN());
        apply_masks(masks_, vis, cols, b, h, i, j0);  // hidden keys: their fill or -inf; visible: NaN
        apply_masks(masks_, s, cols, b, h, i, j0);
      }
      std::fill(s + cols, s + colsp, ninf);
      const Acc shift = io_.shift[row0 + r];
      dead_[r] = std::isinf(shift) && shift < 0;
      if (dead_[r])
        std::fill(s, s + colsp, Acc(0));
      else
        io_.row_sums[chunk * rows_total + row0 + r] += kernel::probs_row(s, colsp, shift, io_.rel[row0 + r]);
      if (p_.drop.p > 0) {  // Z: the weights after dropout
        Acc* z = z_.data() + r * lds_;
        std::copy(s, s + colsp, z);
        random::scale_row(p_.drop, std::uint32_t(b), std::uint32_t(h), std::uint32_t(i), std::uint32_t(j0), cols, z);
      }
    }
    const auto [d_out, ldd] = rows_of(io_.d_out, b, h, i0, rows, pr_.v_dim, dvp_, do_.data());
    // dV += Zᵀ · dO
    kernel::pv_tile_transposed(p_.drop.p > 0 ? z_.data() : s_.data(), lds_, cols, d_out, ldd, rows, dv_.data(), dvp_,
                               dvp_);
    // dP = dO · Vᵀ, then dS
    kernel::qk_tile(d_out, ldd, rows, vp_.data(), pr_.v_dim, colsp, dp_.data(), lds_);
    const Acc scale = Acc(p_.scale);
    for (std::size_t r = 0; r < rows; ++r) {
      Acc* dp = dp_.data() + r * lds_;
      const std::size_t i = i0 + r;
      if (dead_[r]) {
        std::fill(dp, dp + colsp, Acc(0));
        continue;
      }
      if (p_.drop.p > 0)
        random::scale_row(p_.drop, std::uint32_t(b), std::uint32_t(h), std::uint32_t(i), std::uint32_t(j0), cols, dp);
      kernel::softmax_grad_row(s_.data() + r * lds_, dp, colsp, io_.delta[row0 + r], n_ops > 0 ? Acc(1) : scale);
      if (partial_[r]) {
        const Acc* vis = vis_.data() + r * lds_;
        for (std::size_t c = 0; c < cols; ++c)
          if (!std::isnan(vis[c])) dp[c] = 0;  // filled or excluded: a constant
      }
      if constexpr (n_ops > 0) {  // the chain through the modifiers, then the scale
        for (std::size_t c = 0; c < cols; ++c)
          if (dp[c] != Acc(0)) through_ops(s0_[r * lds_ + c], b, h, i, j0 + c, &dp[c]);
        kernel::scale_row(dp, colsp, scale);
      }
      if constexpr (tensor_scores)
        kernel::scaled_copy(dp, 1, cols, Acc(1), &io_.dx(b, h, i, j0), io_.dx.inner_stride());
    }
    if constexpr (!tensor_scores) {
      // dK += dSᵀ · Q, dQ_chunk += dS · K
      kernel::pv_tile_transposed(dp_.data(), lds_, cols, q_rows_, ldq_, rows, dk_.data(), dqp_, dqp_);
      Acc* dq = io_.dq_part + (chunk * rows_total + row0) * dqp_;
      kernel::pv_tile(dp_.data(), lds_, rows, kr_.data(), dqp_, cols, dq, dqp_, dqp_);
    }
  }

  /// The modifiers on one score: returns the final score; with g, turns the gradient at the final
  /// score into the gradient at the first modifier's input, and records it at every bias on the way.
  Acc through_ops(Acc s, std::size_t b, std::size_t h, std::size_t i, std::size_t j, Acc* g) const {
    std::array<Acc, n_ops + 1> deriv{};
    std::size_t k = 0;
    hana::for_each(ops_, [&](const auto& op) {
      const dual<Acc> y = op(dual<Acc>{s, Acc(1)}, b, h, i, j);
      deriv[k++] = y.d;
      s = y.v;
    });
    if (g) {
      const std::size_t at = ((b * pr_.q_heads + h) * pr_.q_len + i) * pr_.kv_len + j;
      for (std::size_t m = n_ops; m-- > 0;) {
        if (io_.bias_full[m]) io_.bias_full[m][at] = *g;
        *g *= deriv[m];
      }
    }
    return s;
  }

  const Plan& p_;
  const problem& pr_;
  const Ops& ops_;
  const Masks& masks_;
  const backward_schedule& bs_;
  const IO& io_;
  std::size_t bq_ = 0, lds_ = 0, dqp_ = 0, dvp_ = 0;
  const Acc* q_rows_ = nullptr;  // this query block's rows (in place or in q_), ldq_ apart
  std::size_t ldq_ = 0;
  kernel::aligned_vector<Acc> q_, do_, s_, s0_, dp_, vis_, z_, kp_, vp_, kr_, dk_, dv_;
  std::vector<char> dead_, partial_;
};

}  // namespace xattn
