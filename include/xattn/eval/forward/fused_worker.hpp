#pragma once
// One worker of the fused pass: it runs a task's steps of the forward program (plan/program.hpp)
// for a (batch, query head, query block) -- for an attention, key blocks streamed through score
// tile -> modifiers -> masks -> online softmax -> P·V -- keeping only tiles of size block_q x
// block_k. Nothing of size Sq x Skv is ever allocated. The score path (Path::tiles) fills the score
// tile and the value reader (values/reader.hpp) adds P·V: the worker knows neither how the scores
// are computed nor how V is stored, and the program says which steps run in which order.
#include "../../hana.hpp"
#include "../../kernel/aligned.hpp"
#include "../../kernel/blocking.hpp"
#include "../../kernel/instances.hpp"
#include "../../kernel/prefetch_queue.hpp"
#include "../../kernel/rows.hpp"
#include "../../layout.hpp"
#include "../../random/philox_dropout.hpp"
#include "../operands/head_rows.hpp"
#include "../plan/program.hpp"
#include "../plan/schedule.hpp"
#include "../tiling/apply_modifiers.hpp"
#include "../tiling/mask_eval.hpp"
#include "../tiling/tasks.hpp"
#include "../tiling/tile_extent.hpp"
#include "../values/reader.hpp"
#include "key_mass_record.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <utility>
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

/// Which (head, query) each row of a task's tile is: rows of one head, queries i0 + r (per_head 0),
/// or the query heads of a GQA group stacked, per_head rows each (head h0 + r / per_head, query
/// r % per_head: grouped-query decoding, where each key is then loaded once for the whole group).
struct row_map {
  std::size_t h0 = 0, i0 = 0, per_head = 0;
  std::size_t h(std::size_t r) const noexcept { return per_head ? h0 + r / per_head : h0; }
  std::size_t i(std::size_t r) const noexcept { return per_head ? r % per_head : i0 + r; }
};

template <class Acc, class Path, class Plan, class Ops, class Masks>
class fused_worker {
 public:
  using keys_t = typename Path::keys;

  fused_worker(const Plan& p, const problem& pr, const Ops& ops, const Masks& masks, const keys_t& keys,
               const forward_schedule& fs, bool fold_log2e)
      : p_(p),
        pr_(pr),
        ops_(ops),
        masks_(masks),
        tiles_(p.base, pr, keys, fs),
        bq_(fs.block_q),
        bk_(fs.block_k),
        lds_(tile_stride<Acc>(bk_)),
        dvp_(simd::padded<Acc>(pr.v_dim)),
        fold_log2e_(fold_log2e),
        sc_(Acc(p.scale * (fold_log2e ? kernel::log2e : 1.0))),
        s_(bq_ * lds_),
        o_(bq_ * dvp_),
        values_(p.v, pr, fs),
        st_(bq_) {}

  /// The rows of task c: a query block of one head, or every query of a GQA group's heads stacked
  /// (group x Sq <= block_q rows, each key then loaded once for the whole group).
  std::pair<row_map, std::size_t> task_rows(const forward_task& c, std::size_t group_rows) const {
    if (group_rows > 0) return {row_map{c.h / group_rows * group_rows, 0, pr_.q_len}, group_rows * pr_.q_len};
    return {row_map{c.h, c.i0, 0}, std::min(bq_, pr_.q_len - c.i0)};
  }

  /// Runs the steps [first, last) of prog (a task's body) for rows m against keys [k0, k1)
  /// (block_k-aligned k0), writing into out (the output, the weights or the scores) and, when lse
  /// has data, each row's log-sum-exp; prefetch() is the prefetch_next step.
  template <class Out, class Prefetch>
  void run_task(const program& prog, std::size_t first, std::size_t last, std::size_t b, const row_map& m,
                std::size_t rows, std::size_t k0, std::size_t k1, const strided_view<Out>& out,
                const strided_view<Acc, 3>& lse, Prefetch&& prefetch) {
    for (std::size_t at = first; at < last; ++at) switch (prog[at].kind) {
        case step::prefetch_next:
          prefetch();
          break;
        case step::start_rows:
          start(b, m, rows, k0 == 0);
          if (mass_sink_) mass_.start(rows, k0, k1 - k0, bk_);
          break;
        case step::key_blocks: {
          const std::size_t body = prog.body_end(at);
          for (std::size_t j0 = k0; j0 < k1; j0 += bk_)
            key_block(prog, at, body, b, m, rows, j0, std::min(bk_, k1 - j0), out);
          at = body - 1;
          break;
        }
        case step::finalize:
          for (std::size_t r = 0; r < rows; ++r) {
            ahead_.issue(ahead_rate_);
            kernel::finalize_row(o_.data() + r * dvp_, pr_.v_dim, st_[r].l, out.row(b, m.h(r), m.i(r)),
                                 out.inner_stride());
            if (lse.data) lse(b, m.h(r), m.i(r)) = kernel::row_lse(st_[r]);
            if (mass_sink_) mass_sink_(b, m.h(r), m.i(r), k0, k1 - k0, mass_.weights(r, st_[r]));
          }
          break;
        default:  // not a task's step
          break;
      }
  }

  /// Turns on the key-mass tap: each finished row's softmax weights over its task's keys [k0, k0 + n)
  /// go to sink(b, h, i, k0, n, w) (a decoding split's chunk: relative to the chunk's log-sum-exp).
  using mass_sink = std::function<void(std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, const Acc*)>;
  void tap_key_mass(mass_sink sink) {
    if (!mass_sink_) mass_sink_ = std::move(sink);
  }

  /// Queues the query and output rows of task (b, h, i0) (forward_schedule::prefetch_next), to be
  /// fetched while the tasks before it run.
  template <class Out>
  void prefetch_task(std::size_t b, std::size_t h, std::size_t i0, const strided_view<Out>& out) {
    const std::size_t rows = std::min(bq_, pr_.q_len - i0);
    if constexpr (requires { p_.base.q.view; }) queue_head_rows(ahead_, p_.base.q.view, b, h, i0, rows, false);
    queue_head_rows(ahead_, out, b, h, i0, rows, true);
  }

  /// Queues the key and value rows that query head (b, h) reads.
  void prefetch_head(std::size_t b, std::size_t h) {
    const std::size_t hk = kv_head(h);
    if constexpr (requires { p_.base.k.view; }) queue_head_rows(ahead_, p_.base.k.view, b, hk, 0, pr_.kv_len, false);
    values_.queue_head(ahead_, b, hk, pr_.kv_len);
  }

  /// Each row's maximum final score m and ln Σ_j e^(s_j - m) over every key, for queries
  /// [i0, i0 + block_q), into stats[r]: the statistics of rows whose log-sum-exp is too large for
  /// the accumulator type to resolve a probability (a row of d2l's -1e6 fills: its float
  /// log-sum-exp is off by up to 0.06, while s - m is exact). Needs natural units (the scores
  /// pass's worker); the sum is kept in double.
  void run_row_stats(std::size_t b, std::size_t h, std::size_t i0, std::pair<Acc, Acc>* stats) {
    const std::size_t rows = std::min(bq_, pr_.q_len - i0);
    std::vector<double> m(rows, -std::numeric_limits<double>::infinity()), l(rows, 0.0);
    if (const double t = p_.term.logit(b, h); !std::isinf(t)) {  // the softmax term: a key of score t, in every row
      std::fill(m.begin(), m.end(), t);
      std::fill(l.begin(), l.end(), 1.0);
    }
    tiles_.load_queries(b, h, i0, rows, sc_);
    for (std::size_t j0 = 0; j0 < pr_.kv_len; j0 += bk_) {
      const std::size_t cols = std::min(bk_, pr_.kv_len - j0);
      const block_verdict v = classify_block(masks_, b, h, i0, i0 + rows, j0, j0 + cols);
      if (v.skip) continue;  // every key excluded: nothing to add
      const row_map at{h, i0, 0};
      const tile_extent p{cols, 0, rows, v.all_visible};
      block_tile(b, at, p, j0);
      modify_mask(b, at, p, j0);
      for (std::size_t r = 0; r < rows; ++r) {
        const Acc* s = s_.data() + r * lds_;
        double top = m[r];
        for (std::size_t c = 0; c < cols; ++c) top = std::max(top, double(s[c]));
        if (std::isinf(top) && top < 0) continue;
        l[r] *= std::exp(m[r] - top);  // 0 the first time (m = -inf)
        for (std::size_t c = 0; c < cols; ++c) l[r] += std::exp(double(s[c]) - top);
        m[r] = top;
      }
    }
    for (std::size_t r = 0; r < rows; ++r) stats[r] = {Acc(m[r]), Acc(std::log(l[r]))};
  }

 private:
  std::size_t kv_head(std::size_t h) const { return h / (pr_.q_heads / pr_.kv_heads); }

  /// One key block [j0, j0 + all) of a task: the loop step prog[loop] classifies it, the steps
  /// (loop, last) of its body run on the part that takes part (none: each step does nothing, but
  /// the passes that write every block still write it).
  template <class Out>
  void key_block(const program& prog, std::size_t loop, std::size_t last, std::size_t b, const row_map& m,
                 std::size_t rows, std::size_t j0, std::size_t all, const strided_view<Out>& out) {
    const block_pass pass = prog[loop].pass;
    tile_extent p;
    if (pass == block_pass::scores) {  // every row, in natural units: a filled block is written, not skipped
      const block_verdict v = classify_block(masks_, b, m.h0, m.i0, m.i0 + rows, j0, j0 + all);
      if (!v.skip) p = tile_extent{all, 0, rows, v.all_visible};
    } else {
      p = block_part(b, m, rows, j0, all);
    }
    if (p.cols == 0 && (pass == block_pass::output || pass == block_pass::state)) return;  // adds exactly nothing
    const auto body = [&] {
      for (std::size_t at = loop + 1; at < last; ++at) block_step(prog[at].kind, b, m, rows, j0, all, p, out);
    };
    // a cache's value rows prefetched as the block's keys are read, where the value reader asks for it
    if constexpr (requires { tiles_.prefetch_with_keys(kernel::row_prefetch{}); })
      if (pass == block_pass::output && values_.with_prefetch(b, kv_head(m.h0), j0, [&](kernel::row_prefetch also) {
            tiles_.prefetch_with_keys(also);
            body();
            tiles_.prefetch_with_keys({});
          }))
        return;
    body();
  }

  /// One step of a key block's body on its part p (cols 0: no part).
  template <class Out>
  void block_step(step k, std::size_t b, const row_map& m, std::size_t rows, std::size_t j0, std::size_t all,
                  const tile_extent& p, const strided_view<Out>& out) {
    const std::size_t colsp = simd::padded<Acc>(p.cols);
    switch (k) {
      case step::scores:
        if (p.cols > 0) block_tile(b, m, p, j0);
        break;
      case step::modify_mask:
        if (p.cols > 0) modify_mask(b, m, p, j0);
        break;
      case step::online_softmax:
      case step::softmax_state:
        for (std::size_t r = p.r0; r < p.r1 && p.cols > 0; ++r) {
          const bool to_output = k == step::online_softmax;
          Acc* s = s_.data() + r * lds_;
          if (!fold_log2e_) kernel::to_base2_row(s, colsp);  // padding is overwritten next
          std::fill(s + p.cols, s + colsp, -std::numeric_limits<Acc>::infinity());
          kernel::online_softmax_row(s, colsp, st_[r], to_output ? o_.data() + r * dvp_ : nullptr, dvp_);
          if (to_output && mass_sink_) mass_.record(r, j0, s, p.cols, st_[r].m);  // before dropout: the weights
          ahead_.issue(ahead_rate_);
          if (to_output && p_.drop.p > 0)  // after the running sum: dropout rescales what reaches V, not the normaliser
            random::scale_row(p_.drop, std::uint32_t(b), std::uint32_t(m.h(r)), std::uint32_t(m.i(r)),
                              std::uint32_t(j0), p.cols, s);
        }
        break;
      case step::values:
        if constexpr (requires { values_.accumulate(b, b, j0, all, s_.data(), lds_, rows, o_.data(), dvp_); })
          if (p.cols > 0)
            values_.accumulate(b, kv_head(m.h0), j0, p.cols, s_.data() + p.r0 * lds_, lds_, p.r1 - p.r0,
                               o_.data() + p.r0 * dvp_, dvp_);
        break;
      case step::write_weights:
        for (std::size_t r = 0; r < rows; ++r) {
          Acc* s = s_.data() + r * lds_;
          const std::size_t cols = r >= p.r0 && r < p.r1 ? p.cols : 0;
          if (cols > 0) {
            if (!fold_log2e_) kernel::to_base2_row(s, simd::padded<Acc>(cols));
            kernel::weights_row(s, simd::padded<Acc>(cols), st_[r]);
            if (p_.drop.p > 0)
              random::scale_row(p_.drop, std::uint32_t(b), std::uint32_t(m.h(r)), std::uint32_t(m.i(r)),
                                std::uint32_t(j0), cols, s);
          }
          std::fill(s + cols, s + all, Acc(0));  // hidden keys, and keys no row of the block can see
          write_row(s, all, out, b, m.h(r), m.i(r), j0);
        }
        break;
      case step::write_scores:
        for (std::size_t r = 0; r < rows; ++r) {
          Acc* s = s_.data() + r * lds_;
          if (p.cols == 0) std::fill(s, s + all, -std::numeric_limits<Acc>::infinity());  // exclusion wins
          write_row(s, all, out, b, m.h(r), m.i(r), j0);
        }
        break;
      default:  // not a key block's step
        break;
    }
  }

  /// Loads the rows' queries and starts their running softmax: from the softmax term when the keys
  /// begin at 0 (a decoding split adds each row's term once, in its first chunk), the accumulators
  /// at 0.
  void start(std::size_t b, const row_map& m, std::size_t rows, bool first_keys) {
    std::fill(o_.begin(), o_.begin() + rows * dvp_, Acc(0));
    ahead_rate_ = (ahead_.pending() + 2 * rows - 1) / (2 * rows);  // all of it by the end of the task
    if (m.per_head == 0)
      tiles_.load_queries(b, m.h0, m.i0, rows, sc_);
    else
      for (std::size_t r = 0; r < rows; r += m.per_head) tiles_.load_queries(b, m.h(r), 0, m.per_head, sc_, r);
    for (std::size_t r = 0; r < rows; ++r)
      st_[r] =
          first_keys ? kernel::term_state(Acc(p_.term.logit(b, m.h(r)) * kernel::log2e)) : kernel::row_state<Acc>{};
  }

  /// The part of key block [j0, j0 + all) that takes part for the task's rows (cols 0: skipped: the
  /// block adds exactly nothing). Grouped rows: skipped if every head skips it, masked unless all
  /// see all of it.
  tile_extent block_part(std::size_t b, const row_map& m, std::size_t rows, std::size_t j0, std::size_t all) const {
    if (m.per_head != 0) {
      bool skip = true, all_visible = true;
      for (std::size_t r = 0; r < rows; r += m.per_head) {
        const block_verdict v = classify_block(masks_, b, m.h(r), 0, m.per_head, j0, j0 + all);
        skip = skip && v.skip;
        all_visible = all_visible && v.all_visible;
      }
      return skip ? tile_extent{} : tile_extent{all, 0, rows, all_visible};
    }
    // A block a filling mask hides adds exactly nothing once every row's running max is so far
    // above the fill that 2^(fill - m) underflows to 0.
    const auto underflows = [&](double fill_max) {
      const double margin = std::is_same_v<Acc, float> ? 130 : 1100;
      for (std::size_t r = 0; r < rows; ++r)
        if (!(double(st_[r].m) > fill_max * kernel::log2e + margin)) return false;
      return true;
    };
    return extent_of(masks_, b, m.h0, m.i0, rows, j0, all, kernel::blocking<Acc>::rows, underflows);
  }

  /// The score tile of key block [j0, j0 + cols) for rows [p.r0, p.r1), in natural units unless
  /// log2 e is folded into the scale.
  void block_tile(std::size_t b, const row_map& m, const tile_extent& p, std::size_t j0) {
    // the tile's rows: queries i0 + r of one head, or rows of the stacked heads (loaded from row 0)
    tiles_.scores(b, m.h(p.r0), kv_head(m.h0), m.per_head ? p.r0 : m.i0 + p.r0, p.r1 - p.r0, j0, p.cols,
                  simd::padded<Acc>(p.cols), s_.data() + p.r0 * lds_, lds_);
  }

  /// The modifiers and masks on the score tile (masks only if some mask hides something in it).
  void modify_mask(std::size_t b, const row_map& m, const tile_extent& p, std::size_t j0) {
    for (std::size_t r = p.r0; r < p.r1; ++r) {
      Acc* s = s_.data() + r * lds_;
      apply_ops(s, p.cols, b, m.h(r), m.i(r), j0);
      if (!p.all_visible) apply_masks(masks_, s, p.cols, b, m.h(r), m.i(r), j0);
    }
  }

  void apply_ops(Acc* s, std::size_t cols, std::size_t b, std::size_t h, std::size_t i, std::size_t j0) const {
    apply_modifiers(ops_, s, cols, b, h, i, j0);
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
  kernel::aligned_vector<Acc> s_, o_;
  value_reader<Acc, std::decay_t<decltype(std::declval<const Plan&>().v)>> values_;
  std::vector<kernel::row_state<Acc>> st_;
  kernel::prefetch_queue ahead_;  // what the next tasks read and write (forward_schedule::prefetch_next)
  std::size_t ahead_rate_ = 0;    // lines asked for per row visited
  key_mass_record<Acc> mass_;     // the key-mass tap's record of the task (only with a sink)
  mass_sink mass_sink_;
};

}  // namespace xattn
