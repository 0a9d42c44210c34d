#pragma once
// A recorded score that does not separate (an L1 distance, a per-pair remainder too long), the
// recorded path's pairwise form: the whole recording run pair by pair on lanes by the lane machine,
// one query row against a block of keys per run -- the query's values the same in every lane
// (kept once), the keys read feature-major, one vector per feature and block.
//   forward:  every key transposed once per evaluation; per tile row one run.
//   backward: per tile row one run forward and in reverse: the gradient at the query's values
//             summed over the keys, the keys' kept per block feature-major, the learnables' per
//             task (summed in task order). Pairs whose guards fail: by the policy itself, forward
//             and on the tape.
#include "../../../kernel/aligned.hpp"
#include "../../../kernel/rows.hpp"
#include "../../../kernel/trace.hpp"
#include "../../../policy/gradient.hpp"
#include "../../../record/machine.hpp"
#include "../../../record/separate.hpp"
#include "../../operands/features.hpp"
#include "../../plan/schedule.hpp"
#include "common.hpp"
#include "pair_program.hpp"

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

namespace xattn {

/// Every key of every head feature-major, (B, Hkv, dk, Skv padded): a block of keys' feature d is
/// one run of lanes.
template <class Acc>
struct feature_major_keys {
  std::size_t heads = 0, dk = 0, ld = 0;
  kernel::aligned_vector<Acc> data;

  feature_major_keys() = default;
  explicit feature_major_keys(const problem& pr)
      : heads(pr.kv_heads),
        dk(pr.k_dim),
        ld(simd::padded<Acc>(pr.kv_len) + simd::width<Acc>),  // a padded block past the last key reads zeros
        data(pr.batch * pr.kv_heads * pr.k_dim * ld, Acc(0)) {}

  const Acc* at(std::size_t b, std::size_t h, std::size_t d, std::size_t j) const noexcept {
    return data.data() + ((b * heads + h) * dk + d) * ld + j;
  }
  /// Transposes view k: an orphaned `omp for` over heads.
  template <class View>
  void build(const View& k, const problem& pr) {
    kernel::trace::note(kernel::tile_op{kernel::operation::project_rows});
    const auto count = std::ptrdiff_t(pr.batch * heads);
    std::vector<Acc> row(dk);
#pragma omp for schedule(static)
    for (std::ptrdiff_t bh = 0; bh < count; ++bh) {
      const std::size_t b = std::size_t(bh) / heads, h = std::size_t(bh) % heads;
      Acc* to = data.data() + std::size_t(bh) * dk * ld;
      for (std::size_t j = 0; j < pr.kv_len; ++j) {
        kernel::scaled_copy(k.row(b, h, j), k.inner_stride(), dk, Acc(1), row.data(), 1);
        for (std::size_t d = 0; d < dk; ++d) to[d * ld + j] = row[d];
      }
    }
  }
};

/// The recording on lanes of pairs: one query row (inputs q[0, dq), the same in every lane)
/// against keys j0.. of a head (inputs k[0, dk), feature-major).
template <class Acc>
class lane_program_runner {
  using machine = record::machine<Acc>;

 public:
  explicit lane_program_runner(const record::separated& s, std::size_t dq, std::size_t dk)
      : s_(s), dq_(dq), in_(dq + dk) {}

  void run(const Acc* q, const feature_major_keys<Acc>& k, std::size_t b, std::size_t hk, std::size_t j0,
           std::size_t lanes) {
    kernel::trace::note(kernel::tile_op{kernel::operation::pair_scores});
    for (std::size_t d = 0; d < dq_; ++d) in_[d] = {q + d, true};
    for (std::size_t d = 0; d < k.dk; ++d) in_[dq_ + d] = {k.at(b, hk, d, j0), false};
    m_.run(s_.pair, lanes, in_.data());
  }
  const Acc* score() const noexcept { return m_.value(s_.pair.outputs[0]); }
  bool guarded() const noexcept { return !s_.expect.empty(); }
  bool holds(std::size_t l) const noexcept {
    for (std::size_t g = 0; g < s_.expect.size(); ++g)
      if ((m_.value(s_.pair.outputs[1 + g])[l] != Acc(0)) != bool(s_.expect[g])) return false;
    return true;
  }
  void reverse(const Acc* ds) {
    kernel::trace::note(kernel::tile_op{kernel::operation::pair_gradients});
    const std::pair<std::uint32_t, const Acc*> seed{s_.pair.outputs[0], ds};
    m_.reverse(s_.pair, std::span(&seed, 1));
  }
  const machine& values() const noexcept { return m_; }

 private:
  const record::separated& s_;
  std::size_t dq_;
  machine m_;
  std::vector<typename machine::input> in_;
};

template <class Acc, class Base>
struct lane_score {
  using policy_t = typename Base::policy_type;
  using S = score_scalar_t<policy_t, Acc>;

  // ---- forward ----

  struct keys {
    std::shared_ptr<const record::separation> sep;
    feature_major_keys<Acc> k;

    keys(std::shared_ptr<const record::separation> from, const Base&, const problem& pr, const forward_schedule&)
        : sep(std::move(from)), k(pr) {}
    void build(const Base& base, const problem& pr) { k.build(base.k.view, pr); }
  };

  class tiles {
   public:
    tiles(const Base& base, const problem& pr, const keys& k, const forward_schedule& fs)
        : base_(base), k_(k), pr_(pr), q_(fs.block_q * pr.q_dim), run_(k.sep->parts, pr.q_dim, pr.k_dim) {}

    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      const auto& qv = base_.q.view;
      scale_ = scale;
      if (at == 0) i0_ = i0;
      for (std::size_t r = 0; r < rows; ++r)
        kernel::scaled_copy(qv.row(b, h, i0 + r), qv.inner_stride(), pr_.q_dim, Acc(1),
                            q_.data() + (at + r) * pr_.q_dim, 1);
    }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds) {
      const auto& kv = base_.k.view;
      for (std::size_t r = 0; r < rows; ++r) {
        const Acc* q = q_.data() + (i0 - i0_ + r) * pr_.q_dim;
        run_.run(q, k_.k, b, hk, j0, colsp);
        const Acc* out = run_.score();
        Acc* row = s + r * lds;
        for (std::size_t c = 0; c < colsp; ++c) row[c] = scale_ * out[c];
        if (run_.guarded())
          for (std::size_t c = 0; c < cols; ++c)
            if (!run_.holds(c))
              row[c] = scale_ * policy_score<Acc, S>(base_.policy, q, 1, pr_.q_dim, kv.row(b, hk, j0 + c),
                                                     kv.inner_stride(), pr_.k_dim, buf_);
      }
    }

   private:
    const Base& base_;
    const keys& k_;
    const problem& pr_;
    std::size_t i0_ = 0;
    Acc scale_ = 1;
    std::vector<Acc> q_;  // the block's query rows
    lane_program_runner<Acc> run_;
    std::vector<S> buf_;
  };

  // ---- backward ----

  struct grads {
    using P = policy_t;
    std::shared_ptr<const record::separation> sep;
    gradient_targets<Acc> to;
    row_features<Acc> q;  // the queries in Acc
    feature_major_keys<Acc> k;
    row_features<Acc> dq, dk;  // their gradients (dq's rows padded)
    parameter_slots slots;
    std::vector<std::size_t> slot_of;  // the slot of each of the recording's learnables
    std::vector<Acc> param_parts;      // (tasks, slots)

    grads(std::shared_ptr<const record::separation> from, const Base& base, const problem& pr,
          const backward_schedule& bs, const gradient_targets<Acc>& t)
        : sep(std::move(from)),
          to(t),
          q(pr.batch, pr.q_heads, pr.q_len, pr.q_dim),
          k(pr),
          dq(pr.batch, pr.q_heads, pr.q_len, simd::padded<Acc>(pr.q_dim)),
          dk(pr.batch, pr.kv_heads, pr.kv_len, pr.k_dim),
          slots(automatic_slots(base.policy)),
          param_parts(bs.tasks * slots.size(), Acc(0)) {
      for (const void* a : sep->parts.params) slot_of.push_back(slots.find(a));
    }

    void build(const Base& base, const problem& pr) {
      copy_rows(q, base.q.view);
      k.build(base.k.view, pr);
    }
    strided_view<Acc> query_grads() { return dq.view(); }
    void reduce_row(std::size_t, std::size_t, std::size_t, std::size_t) {}
    Acc* task_parameters(std::size_t id) { return param_parts.data() + id * slots.size(); }

    template <class G>
    void finish(const Base&, const problem& pr, const backward_schedule& bs, G& g) {
      kernel::trace::note(kernel::tile_op{kernel::operation::project_back});
      if constexpr (learns_automatically<P>())
        for (std::size_t t = 0; t < bs.tasks; ++t)
          for (std::size_t n = 0; n < slots.size(); ++n) g.d[n] += double(param_parts[t * slots.size() + n]);
      const auto copy = [](const row_features<Acc>& from, const strided_view<Acc>& to, std::size_t d) {
        if (!to.data) return;
        const auto& sh = from.term_at.shape;
        for (std::size_t b = 0; b < sh[0]; ++b)
          for (std::size_t h = 0; h < sh[1]; ++h)
            for (std::size_t j = 0; j < sh[2]; ++j)
              kernel::scaled_copy(from.row(b, h, j), 1, d, Acc(1), to.row(b, h, j), to.inner_stride());
      };
      copy(dq, to.dq, pr.q_dim);
      copy(dk, to.dk, pr.k_dim);
    }
  };

  class grad_tiles {
   public:
    grad_tiles(const Base& base, const problem& pr, grads& g, const backward_schedule& bs, Acc scale)
        : base_(base),
          pr_(pr),
          g_(g),
          scale_(scale),
          lds_(simd::padded<Acc>(bs.block_k)),
          run_(g.sep->parts, pr.q_dim, pr.k_dim),
          dkf_(pr.k_dim * lds_),
          dkraw_(bs.block_k * pr.k_dim),
          failed_(bs.block_q * lds_),
          dparams_(g.slots.size()),
          seed_(lds_) {}

    void begin_task() { std::fill(dparams_.begin(), dparams_.end(), Acc(0)); }
    void load_keys(std::size_t b, std::size_t hk, std::size_t j0, std::size_t) {
      b_ = b, hk_ = hk, j0_ = j0;
      std::fill(dkf_.begin(), dkf_.end(), Acc(0));
      std::fill(dkraw_.begin(), dkraw_.end(), Acc(0));
    }
    void load_queries(std::size_t, std::size_t h, std::size_t i0, std::size_t rows, std::size_t) {
      h_ = h, i0_ = i0, rows_ = rows;
    }

    template <class Range>
    void scores(std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds, Range) {
      for (std::size_t r = 0; r < rows_; ++r) {
        run_.run(query(r), g_.k, b_, hk_, j0_, colsp);
        const Acc* out = run_.score();
        Acc* row = s + r * lds;
        for (std::size_t c = 0; c < colsp; ++c) row[c] = scale_ * out[c];
        if (!run_.guarded()) continue;
        for (std::size_t c = 0; c < cols; ++c)
          if ((failed_[r * lds_ + c] = !run_.holds(c)))
            row[c] = scale_ * policy_score<Acc, S>(base_.policy, query(r), 1, pr_.q_dim, key(c), 1, pr_.k_dim, buf_);
      }
    }

    template <class RowRange, class KeyRange>
    void gradients(const Acc* ds, std::size_t lds, std::size_t cols, std::size_t colsp, Acc* dq, RowRange, KeyRange) {
      const record::program& p = g_.sep->parts.pair;
      const std::size_t ldq = g_.dq.width(), dqn = pr_.q_dim;
      for (std::size_t r = 0; r < rows_; ++r) {
        const Acc* d = ds + r * lds;
        std::copy(d, d + colsp, seed_.begin());
        if (run_.guarded())
          for (std::size_t c = 0; c < cols; ++c)
            if (failed_[r * lds_ + c]) seed_[c] = 0;  // on the tape below
        run_.run(query(r), g_.k, b_, hk_, j0_, colsp);
        run_.reverse(seed_.data());
        const auto& m = run_.values();
        Acc* dq_row = dq + r * ldq;
        for (std::uint32_t i = 0; i < p.size(); ++i) {
          const record::node& x = p.code[i];
          const Acc* a = m.adjoint(i);
          if (x.o == record::op::input && x.a < dqn) {
            Acc sum = 0;
            for (std::size_t c = 0; c < colsp; ++c) sum += a[c];
            dq_row[x.a] += sum;
          } else if (x.o == record::op::input) {
            Acc* to = dkf_.data() + (x.a - dqn) * lds_;
            for (std::size_t c = 0; c < colsp; ++c) to[c] += a[c];
          } else if (x.o == record::op::param && g_.slot_of[x.a] != parameter_slots::npos) {
            Acc sum = 0;
            for (std::size_t c = 0; c < colsp; ++c) sum += a[c];
            dparams_[g_.slot_of[x.a]] += sum;
          }
        }
        if (run_.guarded())
          for (std::size_t c = 0; c < cols; ++c)
            if (failed_[r * lds_ + c] && d[c] != Acc(0)) {
              tmp_.assign(dqn, Acc(0));
              pair_backward(base_.policy, std::span<const Acc>(query(r), dqn), std::span<const Acc>(key(c), pr_.k_dim),
                            d[c], std::span<Acc>(tmp_), std::span<Acc>(dkraw_.data() + c * pr_.k_dim, pr_.k_dim),
                            g_.slots, std::span<Acc>(dparams_));
              for (std::size_t e = 0; e < dqn; ++e) dq_row[e] += tmp_[e];
            }
      }
    }

    void store_keys(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
      for (std::size_t c = 0; c < cols; ++c) {
        Acc* row = g_.dk.row(b, hk, j0 + c);
        for (std::size_t e = 0; e < pr_.k_dim; ++e) row[e] = dkf_[e * lds_ + c] + dkraw_[c * pr_.k_dim + e];
      }
    }
    void end_task(std::size_t id) { std::copy(dparams_.begin(), dparams_.end(), g_.task_parameters(id)); }

   private:
    const Acc* query(std::size_t r) const { return g_.q.row(b_, h_, i0_ + r); }
    /// Key c of the block, gathered from the feature-major keys.
    const Acc* key(std::size_t c) {
      krow_.resize(pr_.k_dim);
      for (std::size_t e = 0; e < pr_.k_dim; ++e) krow_[e] = *g_.k.at(b_, hk_, e, j0_ + c);
      return krow_.data();
    }

    const Base& base_;
    const problem& pr_;
    grads& g_;
    Acc scale_;
    std::size_t lds_, b_ = 0, hk_ = 0, j0_ = 0, h_ = 0, i0_ = 0, rows_ = 0;
    lane_program_runner<Acc> run_;
    kernel::aligned_vector<Acc> dkf_;  // the key block's gradient, feature-major
    std::vector<Acc> dkraw_;           // and the tape's, row by row
    std::vector<char> failed_;
    std::vector<Acc> dparams_, seed_, tmp_, krow_;
    std::vector<S> buf_;
  };
};

}  // namespace xattn
