#pragma once
// One thread's backward work: a task is one key block of a key head. It packs K and V once, then
// walks every query block of every query head that reads this key head, recomputing P from the
// saved log-sum-exp (FlashAttention-2):
//   S = scale·Q·Kᵀ (then modifiers, masks)   P = e^(S − lse)        dV += Zᵀ·dO   (Z: P after dropout)
//   dP = dO·Vᵀ (dropout: × keep/(1−p))       dS = P ∘ (dP − Δ)      dK += scale·dSᵀ·Q
//   dQ_chunk += scale·dS·K
// dK and dV of the key block stay in this worker until every query has been seen (no races); dQ
// goes to its key chunk's partial, summed in chunk order afterwards, each query block's rows taking
// the chunk's key blocks in key order. Filled and excluded scores are constants (dS = 0 there);
// modifiers are differentiated on dual numbers (their learnables on the tape). With a scoring
// policy, Q and K above are its projected features (and α, β its terms, whose gradients are dS's
// row and column sums); a combine policy pairs features one by one instead of the microkernels.
#include "../dual.hpp"
#include "../kernel/aligned.hpp"
#include "../kernel/backward.hpp"
#include "../kernel/pack.hpp"
#include "../kernel/pv.hpp"
#include "../kernel/qk.hpp"
#include "../policy/gradient.hpp"
#include "../random/philox_dropout.hpp"
#include "backward_sources.hpp"
#include "mask_eval.hpp"
#include "resolved_schedule.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace xattn {

template <class Ops>
struct modifier_slots;

/// Where the backward reads and writes, in kernel coordinates.
template <class Acc, class DO, class Ops>
struct backward_io {
  static constexpr std::size_t NOps = decltype(hana::length(std::declval<Ops>()))::value;
  strided_view<const DO> d_out{};               // (B, Hq, Sq, Dv)
  const Acc* shift = nullptr;                   // (B, Hq, Sq) row-major: P = e^(S - shift - rel) (see probs_row);
  const Acc* rel = nullptr;                     //   shift = -inf: the row sees no key
  const Acc* delta = nullptr;                   // (B, Hq, Sq) row-major: rowsum(dO ∘ O)
  Acc* dq_part = nullptr;                       // (chunks, B, Hq, Sq, n_pad): dQ, or dfq of a policy's features
  Acc* dalpha_part = nullptr;                   // (chunks, B, Hq, Sq): gradient at α (policies with terms)
  Acc* dbeta = nullptr;                         // (B, Hkv, Skv): gradient at β
  Acc* dparams_part = nullptr;                  // (task ids, params): a combine policy's parameter gradients
  Acc* row_sums = nullptr;                      // (chunks, B, Hq, Sq): Σ P, 1 per row when lse is this expression's
  std::atomic<std::uint32_t>* turns = nullptr;  // (B, Hq, chunks, query blocks): key blocks of the chunk done there
  strided_view<Acc> dk{}, dv{};                 // (B, Hkv, Skv, n), (B, Hkv, Skv, Dv)
  strided_view<Acc> dx{};                       // tensor scores: (B, Hq, Sq, Skv)
  std::array<Acc*, NOps + 1> bias_full{};       // per modifier: (B, Hq, Sq, Skv) row-major gradient at a bias, or null
  const modifier_slots<Ops>* mods = nullptr;    // the modifiers' learnables
  Acc* dmodify_part = nullptr;                  // (task ids, mods->total): their gradients
};

/// Whether a pair policy keeps per-pair values from the recomputed score for its backward.
template <class Source, class Acc>
constexpr bool saves_pair_values() {
  if constexpr (is_pair_source_v<Source>)
    return combines_saved_in<typename Source::policy_type, Acc>;
  else
    return false;
}

template <class Acc, class Plan, class Ops, class Masks, class IO, class Source>
class backward_worker {
  static constexpr bool tensor_scores = std::is_same_v<Source, tensor_source>;
  static constexpr bool pairs = is_pair_source_v<Source>;
  static constexpr bool terms = pairs || is_separable_source_v<Source>;
  static constexpr bool saves = saves_pair_values<Source, Acc>();
  // a pair policy differentiated automatically runs its per-pair code on lanes of keys (var_lanes)
  static constexpr bool lanes = [] {
    if constexpr (pairs && !saves)
      return pairs_in_lanes<typename Source::policy_type, Acc>();
    else
      return false;
  }();
  static constexpr std::size_t n_ops = decltype(hana::length(std::declval<Ops>()))::value;
  static constexpr bool plain_scores = !tensor_scores && !terms && n_ops == 0;  // S = scale · Q·Kᵀ
  static constexpr Acc ninf = -std::numeric_limits<Acc>::infinity();
  static constexpr std::size_t sw = kernel::strip_width<Acc>;
  static constexpr std::size_t in_strips(std::size_t n) { return (n + sw - 1) / sw * sw; }
  static constexpr bool learning_ops = decltype(hana::any_of(std::declval<Ops>(), [](const auto& op) {
    return hana::bool_c<declares_learnables<std::decay_t<decltype(op)>>>;
  }))::value;

 public:
  backward_worker(const Plan& p, const problem& pr, const Ops& ops, const Masks& masks, const backward_schedule& bs,
                  const IO& io, const Source& src)
      : p_(p), pr_(pr), ops_(ops), masks_(masks), bs_(bs), io_(io), src_(src) {
    bq_ = bs.block_q;
    lds_ = simd::padded<Acc>(bs.block_k);
    if constexpr (!tensor_scores) std::tie(n_, nk_) = widths();
    dqp_ = simd::padded<Acc>(n_);
    dkp_ = simd::padded<Acc>(nk_);
    dvp_ = simd::padded<Acc>(pr.v_dim);
    const std::size_t bk = bs.block_k;
    q_.assign(bq_ * dqp_, Acc(0));
    do_.assign(bq_ * dvp_, Acc(0));
    s_.assign(bq_ * lds_, Acc(0));
    dp_.assign(bq_ * lds_, Acc(0));
    if constexpr (n_ops > 0) s0_.assign(bq_ * lds_, Acc(0));
    vis_.assign(bq_ * lds_, Acc(0));
    z_.assign(bq_ * lds_, Acc(0));
    kp_.assign(kernel::packed_kt_size<Acc>(bk, std::max<std::size_t>(n_, 1)), Acc(0));
    vp_.assign(kernel::packed_kt_size<Acc>(bk, std::max<std::size_t>(pr.v_dim, 1)), Acc(0));
    if constexpr (pairs)
      kr_.assign(bk * dkp_, Acc(0));
    else
      ks_.assign(bk * in_strips(dkp_), Acc(0));
    dos_.assign(bq_ * in_strips(dvp_), Acc(0));
    if constexpr (!pairs && !tensor_scores) qs_.assign(bq_ * in_strips(dqp_), Acc(0));
    dk_.assign(bk * dkp_, Acc(0));
    dv_.assign(bk * dvp_, Acc(0));
    dbeta_.assign(lds_, Acc(0));
    if constexpr (terms) beta_.assign(lds_, Acc(0));
    if constexpr (pairs) dparams_.assign(src.params, Acc(0));
    if constexpr (learning_ops) dmodify_.assign(io.mods->total, Acc(0));
    if constexpr (saves) {
      saved_n_ = src.policy->combine_saved_size(n_);
      saved_ld_ = simd::padded<Acc>(saved_n_);
      saved_.assign(bq_ * bk * saved_ld_, Acc(0));
    }
    dead_.assign(bq_, 0);
    lo_.assign(bq_, 0);
    hi_.assign(bq_, 0);
    partial_.assign(bq_, 0);
    lse2_.assign(bq_, Acc(0));
    sums_.assign(bq_, simd::batch<Acc>(Acc(0)));
  }

  /// Task t (backward_schedule::task_at): one key block of a key head, every query head of its
  /// group. A slot past a short last chunk has nothing to do.
  void run(std::size_t t) {
    const auto [head, chunk, block, id] = bs_.task_at(t);
    const std::size_t j0 = chunk * bs_.chunk_keys + block * bs_.block_k;
    if (j0 >= std::min(pr_.kv_len, (chunk + 1) * bs_.chunk_keys)) return;
    if constexpr (pairs) std::fill(dparams_.begin(), dparams_.end(), Acc(0));
    if constexpr (learning_ops) std::fill(dmodify_.begin(), dmodify_.end(), Acc(0));
    key_block(head / pr_.kv_heads, head % pr_.kv_heads, chunk, j0, std::min(bs_.block_k, pr_.kv_len - j0));
    if constexpr (pairs) std::copy(dparams_.begin(), dparams_.end(), io_.dparams_part + id * dparams_.size());
    if constexpr (learning_ops) std::copy(dmodify_.begin(), dmodify_.end(), io_.dmodify_part + id * dmodify_.size());
  }

 private:
  /// The rows the score products read as Q and K (the plan's, or the policy's features).
  const auto& q_view() const {
    if constexpr (terms)
      return src_.f.q;
    else
      return src_.q;
  }
  const auto& k_view() const {
    if constexpr (terms)
      return src_.f.k;
    else
      return src_.k;
  }
  /// Row lengths of the rows read as Q and K (equal, except for a pair policy on raw rows).
  std::pair<std::size_t, std::size_t> widths() const {
    if constexpr (terms)
      return {src_.f.n, src_.f.nk};
    else
      return {src_.n, src_.n};
  }

  /// The values a saving pair policy kept for pair (row r, column c) of the current tile.
  std::span<Acc> saved(std::size_t r, std::size_t c) {
    return {saved_.data() + (r * bs_.block_k + c) * saved_ld_, saved_n_};
  }

  /// A pair policy's score of one (features) pair: combine, or operator() on raw rows.
  Acc pair_score(std::span<const Acc> fq, std::span<const Acc> fk) const {
    if constexpr (declares_features<std::remove_cvref_t<decltype(*src_.policy)>>)
      return Acc(src_.policy->combine(fq, fk));
    else
      return Acc((*src_.policy)(fq, fk));
  }

  void key_block(std::size_t b, std::size_t hk, std::size_t chunk, std::size_t j0, std::size_t cols) {
    const std::size_t group = pr_.q_heads / pr_.kv_heads;
    const auto& v = p_.v.view;
    kernel::pack_kt<Acc>([&](std::size_t c) { return v.row(b, hk, j0 + c); }, cols, pr_.v_dim, v.inner_stride(),
                         vp_.data());
    if constexpr (!tensor_scores) {
      const auto& k = k_view();
      if constexpr (!pairs)
        kernel::pack_kt<Acc>([&](std::size_t c) { return k.row(b, hk, j0 + c); }, cols, n_, k.inner_stride(),
                             kp_.data());
      const auto key = [&](std::size_t c) { return k.row(b, hk, j0 + c); };
      if constexpr (pairs)
        for (std::size_t c = 0; c < cols; ++c)
          kernel::scaled_copy(key(c), k.inner_stride(), nk_, Acc(1), kr_.data() + c * dkp_, 1);
      else
        kernel::pack_strips<Acc>(key, cols, nk_, k.inner_stride(), ks_.data(), bs_.block_k * sw);
      std::fill(dk_.begin(), dk_.end(), Acc(0));
      std::fill(dbeta_.begin(), dbeta_.end(), Acc(0));
      if constexpr (terms) {  // this block's key terms, zero-padded to whole batches
        const Acc* beta = src_.f.beta + (b * pr_.kv_heads + hk) * pr_.kv_len + j0;
        std::copy(beta, beta + cols, beta_.begin());
        std::fill(beta_.begin() + std::ptrdiff_t(cols), beta_.end(), Acc(0));
      }
    }
    std::fill(dv_.begin(), dv_.end(), Acc(0));
    // The chunk's key blocks add into its dQ partial rows (and row sums, α's gradient) in key
    // order, whichever threads run them: each query block waits for its turn.
    const auto mine = std::uint32_t(j0 % bs_.chunk_keys / bs_.block_k);
    const std::size_t q_blocks = (pr_.q_len + bq_ - 1) / bq_;
    for (std::size_t h = hk * group; h < (hk + 1) * group; ++h)
      for (std::size_t i0 = 0; i0 < pr_.q_len; i0 += bq_) {
        std::atomic<std::uint32_t>& turn =
            io_.turns[((b * pr_.q_heads + h) * bs_.key_chunks + chunk) * q_blocks + i0 / bq_];
        for (std::uint32_t seen = turn.load(std::memory_order_acquire); seen != mine;
             seen = turn.load(std::memory_order_acquire))
          turn.wait(seen, std::memory_order_acquire);
        const std::size_t rows = std::min(bq_, pr_.q_len - i0);
        const block_verdict vd = classify_block(masks_, b, h, i0, i0 + rows, j0, j0 + cols);
        if (!vd.skip) query_block(b, h, chunk, i0, rows, j0, cols, vd.all_visible);
        turn.store(mine + 1, std::memory_order_release);
        turn.notify_all();
      }
    for (std::size_t c = 0; c < cols; ++c) {
      kernel::scaled_copy(dv_.data() + c * dvp_, 1, pr_.v_dim, Acc(1), io_.dv.row(b, hk, j0 + c),
                          io_.dv.inner_stride());
      if constexpr (!tensor_scores)
        kernel::scaled_copy(dk_.data() + c * dkp_, 1, nk_, Acc(1), io_.dk.row(b, hk, j0 + c), io_.dk.inner_stride());
      if constexpr (terms) io_.dbeta[(b * pr_.kv_heads + hk) * pr_.kv_len + j0 + c] = dbeta_[c];
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

  /// For a tile some mask hides part of: each row's visibility (vis_: NaN where visible, else the
  /// mask's fill or -inf) and the keys [lo_, hi_) outside which its weights are 0 (excluded).
  /// The tile products then skip the register blocks that only such keys reach: on the causal
  /// diagonal, half the tile.
  void find_ranges(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t j0, std::size_t cols,
                   bool all_visible) {
    ranged_ = !all_visible;
    tile_rows_ = rows;
    if (all_visible) return;
    for (std::size_t r = 0; r < rows; ++r) {
      Acc* vis = vis_.data() + r * lds_;
      std::fill(vis, vis + cols, std::numeric_limits<Acc>::quiet_NaN());
      apply_masks(masks_, vis, cols, b, h, i0 + r, j0);
      std::size_t lo = cols, hi = 0;
      for (std::size_t c = 0; c < cols; ++c)
        if (vis[c] != ninf) lo = std::min(lo, c), hi = c + 1;
      lo_[r] = std::min(lo, hi), hi_[r] = hi;
    }
  }

  /// range(r, R) of the tile products whose rows are query rows (S, dP, dQ): the keys rows
  /// [r, r + R) do not exclude.
  auto row_range() const {
    return [this](std::size_t r, std::size_t R) -> std::pair<std::size_t, std::size_t> {
      if (!ranged_) return {0, std::size_t(-1)};
      std::size_t lo = std::size_t(-1), hi = 0;
      for (std::size_t i = r; i < r + R; ++i)
        if (lo_[i] < hi_[i]) lo = std::min(lo, lo_[i]), hi = std::max(hi, hi_[i]);
      return lo < hi ? std::pair{lo, hi} : std::pair<std::size_t, std::size_t>{0, 0};
    };
  }

  /// range(k, R) of those whose rows are keys (dV, dK): the query rows that do not exclude
  /// every key of [k, k + R).
  auto key_range() const {
    return [this](std::size_t k, std::size_t R) -> std::pair<std::size_t, std::size_t> {
      if (!ranged_) return {0, std::size_t(-1)};
      std::size_t lo = std::size_t(-1), hi = 0;
      for (std::size_t i = 0; i < tile_rows_; ++i)
        if (lo_[i] < k + R && k < hi_[i]) lo = std::min(lo, i), hi = i + 1;
      return lo < hi ? std::pair{lo, hi} : std::pair<std::size_t, std::size_t>{0, 0};
    };
  }

  /// o += Pᵀ·X for this tile (P: rows x cols, lds_ apart; X: the tile's rows packed in strips, bq_ · sw
  /// apart; o: a row per key, width wide), one strip of columns at a time: the strip (rows · sw
  /// elements, 24 KiB for 96 rows of 64 floats) then serves every register block of keys from L1.
  void transposed_product(const Acc* p, const Acc* x, std::size_t rows, std::size_t cols, Acc* o, std::size_t width) {
    for (std::size_t c = 0; c < width; c += sw)
      kernel::pv_tile_transposed_strips(p, lds_, cols, x + c / sw * bq_ * sw, bq_ * sw, rows, o + c, width,
                                        std::min(sw, width - c), key_range());
  }

  /// dV += Zᵀ·dO for this tile (Z: the weights after dropout, lds_ apart); returns the tile's dO
  /// rows as rows_of gives them, for dP.
  std::pair<const Acc*, std::size_t> value_gradient(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows,
                                                    std::size_t cols, const Acc* z) {
    const auto [d_out, ldd] = rows_of(io_.d_out, b, h, i0, rows, pr_.v_dim, dvp_, do_.data());
    kernel::pack_strips<Acc>([&](std::size_t r) { return d_out + r * ldd; }, rows, pr_.v_dim, 1, dos_.data(), bq_ * sw);
    transposed_product(z, dos_.data(), rows, cols, dv_.data(), dvp_);
    return {d_out, ldd};
  }

  /// The score of (i, j0 + c) before modifiers: scale · (Q·Kᵀ, c(fq, fk), or X) (+ α_i + β_j).
  void scores(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t j0, std::size_t cols) {
    const std::size_t colsp = simd::padded<Acc>(cols);
    const Acc scale = Acc(p_.scale);
    if constexpr (tensor_scores) {
      const auto& x = p_.base.x.view;
      for (std::size_t r = 0; r < rows; ++r)
        kernel::scaled_copy(&x(b, h, i0 + r, j0), x.inner_stride(), cols, scale, s_.data() + r * lds_, 1);
    } else {
      std::tie(q_rows_, ldq_) = rows_of(q_view(), b, h, i0, rows, n_, dqp_, q_.data());
      if constexpr (pairs) {
        for (std::size_t r = 0; r < rows; ++r) {
          const std::span<const Acc> fq(q_rows_ + r * ldq_, n_);
          for (std::size_t c = 0; c < cols; ++c) {
            const std::span<const Acc> fk(kr_.data() + c * dkp_, nk_);
            if constexpr (saves)
              s_[r * lds_ + c] = Acc(src_.policy->combine_saving(fq, fk, saved(r, c)));
            else
              s_[r * lds_ + c] = pair_score(fq, fk);
          }
        }
      } else {
        kernel::qk_tile(q_rows_, ldq_, rows, kp_.data(), n_, colsp, s_.data(), lds_, row_range());
      }
      if constexpr (terms) {
        const Acc* alpha = src_.f.alpha + (b * pr_.q_heads + h) * pr_.q_len + i0;
        for (std::size_t r = 0; r < rows; ++r)
          kernel::add_terms_row(s_.data() + r * lds_, colsp, alpha[r], beta_.data());
      }
      for (std::size_t r = 0; r < rows; ++r) kernel::scale_row(s_.data() + r * lds_, colsp, scale);
    }
  }

  /// Whether a tile takes query_block_plain: every score a plain scaled product Q·Kᵀ (no
  /// modifier, mask, dropout or scoring policy), whole batches of keys, and every row with its
  /// own finite log-sum-exp (rel 0).
  bool plain_tile(std::size_t row0, std::size_t rows, std::size_t cols, bool all_visible) const {
    if (!all_visible || p_.drop.p > 0 || cols % simd::width<Acc> != 0) return false;
    for (std::size_t r = 0; r < rows; ++r)
      if (!std::isfinite(io_.shift[row0 + r]) || io_.rel[row0 + r] != 0) return false;
    return true;
  }

  /// query_block for a plain tile: P and dS come out of the score products' epilogues.
  void query_block_plain(std::size_t b, std::size_t h, std::size_t chunk, std::size_t i0, std::size_t rows,
                         std::size_t cols) {
    const std::size_t row0 = (b * pr_.q_heads + h) * pr_.q_len + i0;
    const std::size_t rows_total = pr_.batch * pr_.q_heads * pr_.q_len;
    ranged_ = false;
    for (std::size_t r = 0; r < rows; ++r) {
      lse2_[r] = io_.shift[row0 + r] * Acc(kernel::log2e);
      sums_[r] = simd::batch<Acc>(Acc(0));
    }
    std::tie(q_rows_, ldq_) = rows_of(q_view(), b, h, i0, rows, n_, dqp_, q_.data());
    const Acc scale = Acc(p_.scale);
    kernel::qk_tile(q_rows_, ldq_, rows, kp_.data(), n_, cols, s_.data(), lds_, kernel::every_column{},
                    kernel::probs_epilogue<Acc>{lse2_.data(), Acc(p_.scale * kernel::log2e), sums_.data()});
    for (std::size_t r = 0; r < rows; ++r) io_.row_sums[chunk * rows_total + row0 + r] += simd::hsum(sums_[r]);
    const auto [d_out, ldd] = value_gradient(b, h, i0, rows, cols, s_.data());
    kernel::qk_tile(d_out, ldd, rows, vp_.data(), pr_.v_dim, cols, dp_.data(), lds_, kernel::every_column{},
                    kernel::softmax_grad_epilogue<Acc>{io_.delta + row0, scale, s_.data() - dp_.data()});
    gradient_products(b, h, chunk, i0, rows, cols);
  }

  void query_block(std::size_t b, std::size_t h, std::size_t chunk, std::size_t i0, std::size_t rows, std::size_t j0,
                   std::size_t cols, bool all_visible) {
    const std::size_t colsp = simd::padded<Acc>(cols);
    const std::size_t row0 = (b * pr_.q_heads + h) * pr_.q_len + i0;  // (B, Hq, Sq) row-major index
    const std::size_t rows_total = pr_.batch * pr_.q_heads * pr_.q_len;
    if constexpr (plain_scores)
      if (plain_tile(row0, rows, cols, all_visible)) return query_block_plain(b, h, chunk, i0, rows, cols);
    find_ranges(b, h, i0, rows, j0, cols, all_visible);
    scores(b, h, i0, rows, j0, cols);
    for (std::size_t r = 0; r < rows; ++r) {
      Acc* s = s_.data() + r * lds_;
      const std::size_t i = i0 + r;
      if constexpr (n_ops > 0) {
        std::copy(s, s + cols, s0_.data() + r * lds_);
        for (std::size_t c = 0; c < cols; ++c) s[c] = through_ops(s[c], b, h, i, j0 + c, nullptr);
      }
      partial_[r] = !all_visible;
      if (!all_visible) apply_masks(masks_, s, cols, b, h, i, j0);
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
    const auto [d_out, ldd] = value_gradient(b, h, i0, rows, cols, p_.drop.p > 0 ? z_.data() : s_.data());
    // dP = dO · Vᵀ, then dS
    kernel::qk_tile(d_out, ldd, rows, vp_.data(), pr_.v_dim, colsp, dp_.data(), lds_, row_range());
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
    if constexpr (!tensor_scores) gradient_products(b, h, chunk, i0, rows, cols);
  }

  /// dQ (or dfq), dK (or dfk), and the terms' and combine parameters' gradients from dS = dp_.
  void gradient_products(std::size_t b, std::size_t h, std::size_t chunk, std::size_t i0, std::size_t rows,
                         std::size_t cols) {
    const std::size_t row0 = (b * pr_.q_heads + h) * pr_.q_len + i0, rows_total = pr_.batch * pr_.q_heads * pr_.q_len;
    Acc* dq = io_.dq_part + (chunk * rows_total + row0) * dqp_;
    if constexpr (terms) {  // α_i and β_j enter every score of their row and column (dS is 0 past cols)
      Acc* dalpha = io_.dalpha_part + chunk * rows_total + row0;
      const std::size_t colsp = simd::padded<Acc>(cols);
      for (std::size_t r = 0; r < rows; ++r)
        dalpha[r] += kernel::accumulate_row(dp_.data() + r * lds_, colsp, dbeta_.data());
    }
    if constexpr (pairs) {
      for (std::size_t r = 0; r < rows; ++r) {
        const std::span<const Acc> fq(q_rows_ + r * ldq_, n_);
        const auto one_pair = [&](std::size_t c) {
          const Acc g = dp_[r * lds_ + c];
          if (g == Acc(0)) return;
          const std::span<Acc> dfq(dq + r * dqp_, n_), dfk(dk_.data() + c * dkp_, nk_);
          if constexpr (saves)
            src_.policy->combine_backward_saved(std::span<const Acc>(saved(r, c)), g, dfq, dfk,
                                                std::span<Acc>(dparams_));
          else
            pair_backward(*src_.policy, fq, std::span<const Acc>(kr_.data() + c * dkp_, nk_), g, dfq, dfk, src_.slots,
                          std::span<Acc>(dparams_));
        };
        if constexpr (lanes) {
          const auto row = [&](Acc* base) { return [this, base](std::size_t c) { return base + c * dkp_; }; };
          pair_backward_row(pair_code(*src_.policy), fq, row(kr_.data()), row(dk_.data()), nk_, dp_.data() + r * lds_,
                            cols, std::span<Acc>(dq + r * dqp_, n_), src_.slots, std::span<Acc>(dparams_), one_pair);
        } else {
          for (std::size_t c = 0; c < cols; ++c) one_pair(c);
        }
      }
    } else {
      // dK += dSᵀ · Q, dQ_chunk += dS · K
      kernel::pack_strips<Acc>([&](std::size_t r) { return q_rows_ + r * ldq_; }, rows, n_, 1, qs_.data(), bq_ * sw);
      transposed_product(dp_.data(), qs_.data(), rows, cols, dk_.data(), dqp_);
      kernel::pv_tile_strips(dp_.data(), lds_, rows, ks_.data(), bs_.block_k * sw, cols, dq, dqp_, dqp_, row_range());
    }
  }

  /// The modifiers on one score: returns the final score; with g, turns the gradient at the final
  /// score into the gradient at the first modifier's input, records it at every bias on the way,
  /// and adds the gradients of each modifier's learnables (a second evaluation, on the tape).
  Acc through_ops(Acc s, std::size_t b, std::size_t h, std::size_t i, std::size_t j, Acc* g) {
    std::array<Acc, n_ops + 1> deriv{}, in{}, g_out{};
    std::size_t k = 0;
    hana::for_each(ops_, [&](const auto& op) {
      in[k] = s;
      const dual<Acc> y = op(dual<Acc>{s, Acc(1)}, b, h, i, j);
      deriv[k++] = y.d;
      s = y.v;
    });
    if (g) {
      const std::size_t at = ((b * pr_.q_heads + h) * pr_.q_len + i) * pr_.kv_len + j;
      for (std::size_t m = n_ops; m-- > 0;) {
        g_out[m] = *g;
        if (io_.bias_full[m]) io_.bias_full[m][at] = *g;
        *g *= deriv[m];
      }
      if constexpr (learning_ops) {
        k = 0;
        hana::for_each(ops_, [&](const auto& op) {
          if constexpr (declares_learnables<std::decay_t<decltype(op)>>)
            if (g_out[k] != Acc(0))
              modifier_parameters_backward(
                  op, in[k], b, h, i, j, g_out[k], io_.mods->slots[k],
                  std::span<Acc>(dmodify_.data() + io_.mods->first[k], io_.mods->slots[k].size()));
          ++k;
        });
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
  const Source& src_;
  std::size_t n_ = 0, nk_ = 0, bq_ = 0, lds_ = 0, dqp_ = 0, dkp_ = 0, dvp_ = 0;
  const Acc* q_rows_ = nullptr;  // this query block's rows (in place or in q_), ldq_ apart
  std::size_t ldq_ = 0;
  kernel::aligned_vector<Acc> q_, do_, s_, s0_, dp_, vis_, z_, kp_, vp_, dk_, dv_;
  // The right operands of the products of the P·V form, in strips (pack_strips): this key block's
  // keys (dQ), this query block's dO (dV) and queries (dK). Rows read in place took 1.1-1.4x the
  // time of the score products; a pair policy reads its key rows kr_ instead (dkp_ apart).
  kernel::aligned_vector<Acc> ks_, dos_, qs_, kr_;
  kernel::aligned_vector<Acc> beta_, dbeta_;  // this key block's terms β and their gradient (lds_ wide)
  std::vector<Acc> dparams_;                  // this task's gradient at combine's parameters
  std::vector<Acc> dmodify_;                  // this task's at the modifiers' learnables
  kernel::aligned_vector<Acc> saved_;         // a saving pair policy's values, saved_ld_ per pair of the tile
  std::size_t saved_n_ = 0, saved_ld_ = 0;
  std::vector<char> dead_, partial_;
  std::vector<Acc> lse2_;                          // a plain tile's rows: log-sum-exp times log2 e
  kernel::aligned_vector<simd::batch<Acc>> sums_;  // a plain tile's rows: partial sums of P
  std::vector<std::size_t> lo_, hi_;               // this tile's rows: keys [lo_, hi_) not excluded (find_ranges)
  std::size_t tile_rows_ = 0;
  bool ranged_ = false;  // some mask hides part of this tile
};

}  // namespace xattn
