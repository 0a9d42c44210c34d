#pragma once
// One thread's backward work: a task is one key block of a key head, run by the task's steps of
// the backward program (plan/program.hpp). The score path loads the
// keys (Path::grad_tiles), the worker packs V; then it walks every query block of every query head
// that reads this key head, recomputing P from the saved log-sum-exp (FlashAttention-2):
//   S = scale·score (the path; then modifiers, masks)   P = e^(S − lse)    dV += Zᵀ·dO (Z: P after dropout)
//   dP = dO·Vᵀ (dropout: × keep/(1−p))                  dS = P ∘ (dP − Δ), back through the modifiers
//   the path takes dS into dQ (its chunk's partial), dK and whatever else it has (terms, parameters).
// dK and dV of the key block stay in this worker until every query has been seen (no races); dQ
// goes to its key chunk's partial, summed in chunk order afterwards, each query block's rows taking
// the chunk's key blocks in key order. Filled and excluded scores are constants (dS = 0 there).
// The worker does not know which score path it runs; its own products, dP = dO·Vᵀ and
// dV += Zᵀ·dO, are the value side's (values/products.hpp).
#include "../../kernel/aligned.hpp"
#include "../../kernel/backward.hpp"
#include "../../kernel/instances.hpp"
#include "../../kernel/trace.hpp"
#include "../../random/philox_dropout.hpp"
#include "../plan/program.hpp"
#include "../plan/schedule.hpp"
#include "../tiling/mask_eval.hpp"
#include "../tiling/tasks.hpp"
#include "../tiling/tile_extent.hpp"
#include "../values/products.hpp"
#include "modifier_chain.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace xattn {

/// What every backward worker reads and writes besides the path's own, in kernel coordinates.
template <class Acc, class DO, class Ops>
struct backward_io {
  strided_view<const DO> d_out{};                       // (B, Hq, Sq, Dv)
  strided_view<const Acc, 3> shift{}, rel{}, delta{};   // (B, Hq, Sq): P = e^(S - shift - rel); rowsum(dO ∘ O)
  strided_view<Acc, 5> dq_part{};                       // (chunks, B, Hq, Sq, n padded): dQ rows (empty: none)
  strided_view<Acc, 4> row_sums{};                      // (chunks, B, Hq, Sq): Σ P, 1 per row when lse is e's
  strided_view<std::atomic<std::uint32_t>, 4> turns{};  // (B, Hq, chunks, query blocks): key blocks done there
  strided_view<Acc> dv{};                               // (B, Hkv, Skv, Dv)
  modifier_gradients<Acc, Ops> modifiers{};
};

template <class Acc, class Path, class Plan, class Ops, class Masks, class IO>
class backward_worker {
  static constexpr Acc ninf = -std::numeric_limits<Acc>::infinity();
  using value_products =
      value_products_t<Acc, typename std::decay_t<decltype(std::declval<const Plan&>().v)>::value_type>;

 public:
  backward_worker(const Plan& p, const problem& pr, const Ops& ops, const Masks& masks, const backward_schedule& bs,
                  const IO& io, typename Path::grads& grads)
      : p_(p),
        pr_(pr),
        masks_(masks),
        bs_(bs),
        io_(io),
        tiles_(p.base, pr, grads, bs, Acc(p.scale)),
        bq_(bs.block_q),
        lds_(simd::padded<Acc>(bs.block_k)),
        mods_(ops, io.modifiers, bq_, lds_),
        ranges_(bq_, lds_),
        values_(pr.v_dim, bs, false),
        s_(bq_ * lds_),
        dp_(bq_ * lds_),
        z_(bq_ * lds_),
        dead_(bq_, 0),
        lse2_(bq_),
        sums_(bq_, simd::batch<Acc>(Acc(0))) {}

  /// Task t (backward_task_at): one key block of a key head, every query head of its group, by
  /// the task's steps [first, last) of prog (backward_program). A slot past a short last chunk has
  /// nothing to do.
  void run(const program& prog, std::size_t first, std::size_t last, std::size_t t) {
    const backward_task task = backward_task_at(t, bs_);
    const std::size_t j0 = task.chunk * bs_.chunk_keys + task.block * bs_.block_k;
    if (j0 >= std::min(pr_.kv_len, (task.chunk + 1) * bs_.chunk_keys)) return;
    const std::size_t b = task.head / pr_.kv_heads, hk = task.head % pr_.kv_heads,
                      cols = std::min(bs_.block_k, pr_.kv_len - j0);
    tiles_.begin_task();
    mods_.begin_task();
    for (std::size_t at = first; at < last; ++at) switch (prog[at].kind) {
        case step::load_block:
          values_.load_keys(p_.v.view, b, hk, j0, cols);
          tiles_.load_keys(b, hk, j0, cols);
          break;
        case step::query_blocks: {
          const std::size_t body = prog.body_end(at);
          query_blocks(prog, at + 1, body, b, hk, task.chunk, j0, cols);
          at = body - 1;
          break;
        }
        case step::store_block:
          values_.store_keys(io_.dv, b, hk, j0, cols);
          tiles_.store_keys(b, hk, j0, cols);
          break;
        default:  // not a task's step
          break;
      }
    tiles_.end_task(task.id);
    mods_.end_task(task.id);
  }

 private:
  /// Every query block of every query head that reads kv head (b, hk), against key block
  /// [j0, j0 + cols): each tile classified and trimmed, then the steps [first, last) on it.
  void query_blocks(const program& prog, std::size_t first, std::size_t last, std::size_t b, std::size_t hk,
                    std::size_t chunk, std::size_t j0, std::size_t cols) {
    const std::size_t group = pr_.q_heads / pr_.kv_heads;
    // The chunk's key blocks add into its dQ partial rows (and row sums, the terms' partials) in
    // key order, whichever threads run them: each query block waits for its turn.
    const auto mine = std::uint32_t(j0 % bs_.chunk_keys / bs_.block_k);
    for (std::size_t h = hk * group; h < (hk + 1) * group; ++h)
      for (std::size_t i0 = 0; i0 < pr_.q_len; i0 += bq_) {
        std::atomic<std::uint32_t>& turn = io_.turns(b, h, chunk, i0 / bq_);
        for (std::uint32_t seen = turn.load(std::memory_order_acquire); seen != mine;
             seen = turn.load(std::memory_order_acquire))
          turn.wait(seen, std::memory_order_acquire);
        const std::size_t rows = std::min(bq_, pr_.q_len - i0);
        const tile_extent x =
            extent_of(masks_, b, h, i0, rows, j0, cols, kernel::blocking<Acc>::rows, [](double) { return false; });
        if (x.cols > 0) tile(prog, first, last, b, h, chunk, i0 + x.r0, x.r1 - x.r0, j0, x.cols, x.all_visible);
        turn.store(mine + 1, std::memory_order_release);
        turn.notify_all();
      }
  }

  /// One tile's steps: the plain tile's epilogues where the tile allows them, else the general
  /// steps, then the gradients from dS.
  void tile(const program& prog, std::size_t first, std::size_t last, std::size_t b, std::size_t h, std::size_t chunk,
            std::size_t i0, std::size_t rows, std::size_t j0, std::size_t cols, bool all_visible) {
    tiles_.load_queries(b, h, i0, rows, chunk);
    bool done = false;  // P and dS are in place
    for (std::size_t at = first; at < last; ++at) switch (prog[at].kind) {
        case step::plain_tile:
          if constexpr (Path::plain_products)
            if (plain_tile(b, h, i0, rows, cols, all_visible) && tiles_plain()) {
              query_block_plain(b, h, chunk, i0, rows, cols);
              done = true;
            }
          break;
        case step::general_tile:
          if (!done) query_block(b, h, chunk, i0, rows, j0, cols, all_visible);
          done = true;
          break;
        case step::tile_gradients:
          tiles_.gradients(dp_.data(), lds_, cols, simd::padded<Acc>(cols), dq_rows(chunk, b, h, i0), ranges_.rows(),
                           ranges_.keys());
          break;
        default:  // not a tile's step
          break;
      }
  }

  /// Where this query block's dQ rows add up (null for a path without query gradients).
  Acc* dq_rows(std::size_t chunk, std::size_t b, std::size_t h, std::size_t i0) const {
    return io_.dq_part.data ? io_.dq_part.row(chunk, b, h, i0) : nullptr;
  }

  /// dV += Zᵀ·dO for this tile (Z: the weights after dropout, lds_ apart); the tile's dO rows stay
  /// loaded for dP.
  void value_gradient(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t cols, const Acc* z) {
    values_.load_queries(io_.d_out, b, h, i0, rows);
    values_.key_gradient(z, lds_, cols, ranges_.keys());
  }

  /// Whether a tile takes the epilogues (the schedule allows them: plain products, no modifier or
  /// dropout): nothing hidden, whole batches of keys, and every row with its own finite
  /// log-sum-exp (rel 0).
  bool plain_tile(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t cols,
                  bool all_visible) const {
    if (!bs_.fused_epilogues || !all_visible || cols % simd::width<Acc> != 0) return false;
    for (std::size_t r = 0; r < rows; ++r)
      if (!std::isfinite(io_.shift(b, h, i0 + r)) || io_.rel(b, h, i0 + r) != 0) return false;
    return true;
  }

  /// Whether the path's tiles allow a plain tile here (a path may score some of its pairs otherwise).
  bool tiles_plain() const {
    if constexpr (requires { tiles_.plain(); })
      return tiles_.plain();
    else
      return true;
  }

  /// A plain tile: P and dS come out of the score products' epilogues.
  void query_block_plain(std::size_t b, std::size_t h, std::size_t chunk, std::size_t i0, std::size_t rows,
                         std::size_t cols) {
    ranges_.whole(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      lse2_[r] = io_.shift(b, h, i0 + r) * Acc(kernel::log2e);
      sums_[r] = simd::batch<Acc>(Acc(0));
    }
    const Acc scale = Acc(p_.scale);
    tiles_.product(cols, s_.data(), lds_,
                   kernel::probs_epilogue<Acc>{lse2_.data(), Acc(p_.scale * kernel::log2e), sums_.data()});
    for (std::size_t r = 0; r < rows; ++r) io_.row_sums(chunk, b, h, i0 + r) += simd::hsum(sums_[r]);
    value_gradient(b, h, i0, rows, cols, s_.data());
    values_.product(cols, dp_.data(), lds_, kernel::every_column{},
                    kernel::softmax_grad_epilogue<Acc>{&io_.delta(b, h, i0), scale, s_.data() - dp_.data()});
  }

  void query_block(std::size_t b, std::size_t h, std::size_t chunk, std::size_t i0, std::size_t rows, std::size_t j0,
                   std::size_t cols, bool all_visible) {
    const std::size_t colsp = simd::padded<Acc>(cols);
    if (all_visible)
      ranges_.whole(rows);
    else
      ranges_.find(masks_, b, h, i0, rows, j0, cols);
    tiles_.scores(cols, colsp, s_.data(), lds_, ranges_.rows());
    for (std::size_t r = 0; r < rows; ++r) {
      Acc* s = s_.data() + r * lds_;
      const std::size_t i = i0 + r;
      mods_.forward_row(s, r, cols, b, h, i, j0);
      if (!all_visible) apply_masks(masks_, s, cols, b, h, i, j0);
      std::fill(s + cols, s + colsp, ninf);
      const Acc shift = io_.shift(b, h, i);
      dead_[r] = std::isinf(shift) && shift < 0;
      if (dead_[r])
        std::fill(s, s + colsp, Acc(0));
      else
        io_.row_sums(chunk, b, h, i) += kernel::probs_row(s, colsp, shift, io_.rel(b, h, i));
      if (p_.drop.p > 0) {  // Z: the weights after dropout
        Acc* z = z_.data() + r * lds_;
        std::copy(s, s + colsp, z);
        random::scale_row(p_.drop, std::uint32_t(b), std::uint32_t(h), std::uint32_t(i), std::uint32_t(j0), cols, z);
      }
    }
    value_gradient(b, h, i0, rows, cols, p_.drop.p > 0 ? z_.data() : s_.data());
    values_.product(colsp, dp_.data(), lds_, ranges_.rows());  // dP = dO · Vᵀ, then dS
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
      kernel::softmax_grad_row(s_.data() + r * lds_, dp, colsp, io_.delta(b, h, i), mods_.empty ? scale : Acc(1));
      if (ranges_.ranged())
        for (std::size_t c = 0; c < cols; ++c)
          if (ranges_.hidden(r, c)) dp[c] = 0;  // filled or excluded: a constant
      if (!mods_.empty) {                       // the chain through the modifiers, then the scale
        mods_.backward_row(dp, r, cols, b, h, i, j0);
        kernel::scale_row(dp, colsp, scale);
      }
    }
  }

  const Plan& p_;
  const problem& pr_;
  const Masks& masks_;
  const backward_schedule& bs_;
  const IO& io_;
  typename Path::grad_tiles tiles_;
  std::size_t bq_, lds_;
  modifier_chain<Acc, Ops> mods_;
  key_ranges<Acc> ranges_;
  value_products values_;  // this key block's V and dV, this query block's dO
  kernel::aligned_vector<Acc> s_, dp_, z_;
  std::vector<char> dead_;                         // rows that see no key
  std::vector<Acc> lse2_;                          // a plain tile's rows: log-sum-exp times log2 e
  kernel::aligned_vector<simd::batch<Acc>> sums_;  // a plain tile's rows: partial sums of P
};

}  // namespace xattn
