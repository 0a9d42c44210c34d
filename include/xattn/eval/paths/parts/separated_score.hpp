#pragma once
// A recorded score that separates (record/separate.hpp), the recorded path's fast form:
//   forward:  every key through the key program once (features fk and the key's scalars, on lanes
//             of rows), the features packed as dot_features packs them; each query block through
//             the query program; per tile Σ fq·fk by the score microkernels, then the per-pair
//             program on lanes of a few tile rows at once. Pairs whose guards fail are scored by the
//             policy itself.
//   backward: every row through its program once; per tile the product recomputed, the per-pair
//             program run forward and in reverse (the gradient at the product, at the rows'
//             scalars, at the learnables), the product's gradients by the microkernels as a dot
//             path's; pairs whose guards fail on the tape (var.hpp). Finally the row programs in
//             reverse take the gradients at the features and scalars back to the rows and the
//             learnables, block by block, summed in a fixed order.
#include "../../../kernel/aligned.hpp"
#include "../../../kernel/qk.hpp"
#include "../../../kernel/rows.hpp"
#include "../../../policy/gradient.hpp"
#include "../../../record/separate.hpp"
#include "../../operands/key_panels.hpp"
#include "../../operands/program_rows.hpp"
#include "../../plan/schedule.hpp"
#include "common.hpp"
#include "dot_grads.hpp"
#include "feature_map.hpp"
#include "pair_program.hpp"

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace xattn {

template <class Acc, class Base>
struct separated_score {
  using policy_t = typename Base::policy_type;
  using S = score_scalar_t<policy_t, Acc>;

  /// A query's gradient row: the features' (padded), its scalars', then its raw row's from the
  /// pairs whose guards fail (only when there are guards); padded to whole batches.
  /// Per row, the scalars the per-pair program reads, then the feature map's values (feature by
  /// feature): what the row program outputs after the features.
  static std::size_t query_values(const record::separated& s) { return s.query_scalars + s.map_features * s.map_query; }
  static std::size_t key_values(const record::separated& s) { return s.key_scalars + s.map_features * s.map_key; }
  static std::size_t query_scalars_at(const record::separated& s) { return simd::padded<Acc>(s.features); }
  static std::size_t query_raw_at(const record::separated& s) { return query_scalars_at(s) + query_values(s); }
  static std::size_t query_grad_width(const record::separated& s, const problem& pr) {
    return simd::padded<Acc>(query_raw_at(s) + (s.guarded() ? pr.q_dim : 0));
  }
  static std::size_t key_scalars_at(const record::separated& s) { return s.features; }
  static std::size_t key_raw_at(const record::separated& s) { return s.features + key_values(s); }
  static std::size_t key_grad_width(const record::separated& s, const problem& pr) {
    return key_raw_at(s) + (s.guarded() ? pr.k_dim : 0);
  }

  /// Whether a row's guards hold (record::separated::row_guard), its scalar c at scalar(c).
  template <class Scalar>
  static bool row_holds(const std::vector<record::separated::row_guard>& guards, Scalar&& scalar) {
    for (const auto& g : guards)
      if ((scalar(g.scalar) != Acc(0)) != g.expect) return false;
    return true;
  }

  // ---- forward ----

  struct keys {
    std::shared_ptr<const record::separation> sep;
    const record::separation& s;
    row_program<Acc> query, key;  // the row programs, their products' matrices made
    program_rows<Acc> rows;       // the keys' features and scalars
    key_panels<strips<Acc>> panels;

    keys(std::shared_ptr<const record::separation> from, const Base&, const problem& pr, const forward_schedule& fs)
        : sep(std::move(from)),
          s(*sep),
          query(s.parts.query, s.parts.query_linear),
          key(s.parts.key, s.parts.key_linear) {
      rows = program_rows<Acc>(pr.batch, pr.kv_heads, pr.kv_len, s.parts.features, key_values(s.parts));
      if (fs.keys == key_reads::panels && s.parts.features)
        panels = make_key_panels<strips<Acc>>(pr, s.parts.features, fs.block_k);
    }
    void build(const Base& base, const problem& pr) {
      run_program_rows(key, base.k.view, pr.k_dim, rows);
      if (!panels.empty())
        pack_key_panels(panels, pr, 1, [&](std::size_t bb, std::size_t h) {
          return [&f = rows.f, bb, h](std::size_t j) { return f.row(bb, h, j); };
        });
    }
  };

  class tiles {
   public:
    tiles(const Base& base, const problem& pr, const keys& k, const forward_schedule& fs)
        : base_(base), k_(k), pr_(pr), bq_(fs.block_q), reader_(k.panels, pr, k.rows.f.width(), fs) {
      const record::separated& s = k.s.parts;
      n_ = s.features;
      q_.resize(bq_ * std::max<std::size_t>(n_, 1));
      qs_.resize(bq_ * s.query_scalars);
      qm_.resize(bq_ * s.map_features * s.map_query);
      map_.emplace(s);
      only_ = s.product_only();
      if (s.guarded() && !only_) raw_.resize(bq_ * pr.q_dim);
      if (only_)
        qfail_.resize(bq_);
      else
        pairs_.emplace(s);
    }

    /// Rows [at, at + rows) of the tile: queries i0.. of head (b, h) through the query program.
    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      const record::separated& s = k_.s.parts;
      const auto& qv = base_.q.view;
      scale_ = scale;
      if (at == 0) i0_ = i0;
      kernel::trace::note(kernel::tile_op{kernel::operation::project_rows});
      const row_program<Acc>& qp = k_.query;
      const std::size_t lanes = row_lanes<Acc>(s.query_linear.others);
      for (std::size_t r0 = 0; r0 < rows; r0 += lanes) {
        const std::size_t count = std::min(lanes, rows - r0);
        rows_.forward(qp, count, lanes, [&](std::size_t l, Acc* dst) {
          kernel::scaled_copy(qv.row(b, h, i0 + r0 + l), qv.inner_stride(), pr_.q_dim, Acc(1), dst, 1);
        });
        const Acc f = only_ ? scale : Acc(1);  // the product is the score: scaled here
        for (std::size_t l = 0; l < count; ++l) {
          const std::size_t t = at + r0 + l;
          for (std::size_t g = 0; g < n_; ++g) q_[t * n_ + g] = f * rows_.output(qp, g, l);
          for (std::size_t c = 0; c < s.query_scalars; ++c) qs_[c * bq_ + t] = rows_.output(qp, n_ + c, l);
          const std::size_t m = s.map_features * s.map_query;
          for (std::size_t c = 0; c < m; ++c) qm_[t * m + c] = rows_.output(qp, n_ + s.query_scalars + c, l);
          if (only_) qfail_[t] = !row_holds(s.query_guards, [&](std::size_t c) { return qs_[c * bq_ + t]; });
        }
      }
      if (!raw_.empty())
        for (std::size_t r = 0; r < rows; ++r)
          kernel::scaled_copy(qv.row(b, h, i0 + r), qv.inner_stride(), pr_.q_dim, Acc(1),
                              raw_.data() + (at + r) * pr_.q_dim, 1);
    }

    /// Rows to prefetch with the keys the next scores read in place (kernel::row_prefetch).
    void prefetch_with_keys(kernel::row_prefetch also) noexcept { also_ = also; }

    void scores(std::size_t b, std::size_t h, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds) {
      const std::size_t r0 = i0 - i0_;  // rows [i0, i0 + rows) of the loaded block
      const Acc* q = q_.data() + r0 * n_;
      const auto& f = k_.rows.f;
      const auto key = [&](std::size_t j) { return f.row(b, hk, j); };
      if (n_ == 0)  // a feature map alone
        ;
      else if (const Acc* kt = reader_.panel(b, hk, j0, 1, key))
        kernel::qk_tile(q, n_, rows, kt, n_, colsp, s, lds);
      else
        kernel::qk_direct(
            q, n_, rows, [&](std::size_t c) { return f.row(b, hk, j0 + c); }, cols, n_, s, lds, also_);
      const record::separated& sp = k_.s.parts;
      const auto& kv = base_.k.view;
      const auto& qv = base_.q.view;
      if (only_) {  // the scores are the products; the pairs of rows failing a guard by the policy
        if (!sp.guarded()) return;
        kfail_.resize(cols);
        bool keys_fail = false;
        for (std::size_t c = 0; c < cols; ++c) {
          kfail_[c] = !row_holds(sp.key_guards, [&](std::size_t g) { return k_.rows.scalar(g, b, hk, j0)[c]; });
          keys_fail = keys_fail || kfail_[c];
        }
        for (std::size_t r = 0; r < rows; ++r)
          if (keys_fail || qfail_[r0 + r])
            for (std::size_t c = 0; c < cols; ++c)
              if (qfail_[r0 + r] || kfail_[c])
                s[r * lds + c] =
                    scale_ * policy_score<Acc, S>(base_.policy, qv.row(b, h, i0 + r), qv.inner_stride(), pr_.q_dim,
                                                  kv.row(b, hk, j0 + c), kv.inner_stride(), pr_.k_dim, buf_);
        return;
      }
      if (!map_->empty()) {  // the feature map's sums, laid out as the tile
        map_->load_keys([&](std::size_t t,
                            std::size_t g) { return k_.rows.scalar(sp.key_scalars + g * sp.map_key + t, b, hk, j0); },
                        cols);
        msum_.resize(rows * lds);
        const std::size_t m = sp.map_features * sp.map_query;
        for (std::size_t r = 0; r < rows; ++r) map_->sum(qm_.data() + (r0 + r) * m, colsp, msum_.data() + r * lds);
      }
      const bool spread = pair_program_runner<Acc>::rows_at_once(lds) > 1;
      if (spread) {  // the block's key scalars, lds wide; one row at a time reads them in place
        kbuf_.resize(sp.key_scalars * lds);
        for (std::size_t c = 0; c < sp.key_scalars; ++c) {
          const Acc* from = k_.rows.scalar(c, b, hk, j0);
          std::copy(from, from + cols, kbuf_.data() + c * lds);
          std::fill(kbuf_.data() + c * lds + cols, kbuf_.data() + (c + 1) * lds, Acc(0));
        }
      }
      const auto key_scalar = [&](std::size_t c) {
        return spread ? kbuf_.data() + c * lds : k_.rows.scalar(c, b, hk, j0);
      };
      // a few rows lds apart at once, or one row of colsp lanes
      const std::size_t R = pair_program_runner<Acc>::rows_at_once(lds), ld = R == 1 ? colsp : lds;
      for (std::size_t g = 0; g < rows; g += R) {
        const std::size_t n = std::min(R, rows - g);
        const auto query_scalar = [&](std::size_t c, std::size_t r) { return qs_[c * bq_ + r0 + g + r]; };
        pairs_->run(s + g * lds, n, ld, query_scalar, key_scalar, msum_.data() + g * lds);
        const Acc* out = pairs_->score();
        for (std::size_t r = 0; r < n; ++r) {
          Acc* row = s + (g + r) * lds;
          const Acc* o = out + r * ld;
          for (std::size_t c = 0; c < colsp; c += simd::width<Acc>)
            simd::store(row + c, simd::load(o + c) * simd::batch<Acc>(scale_));
          if (pairs_->guarded() && pairs_->any_fails(r * ld, colsp))
            for (std::size_t c = 0; c < cols; ++c)
              if (!pairs_->holds(r * ld + c))
                row[c] =
                    scale_ * policy_score<Acc, S>(base_.policy, raw_.data() + (r0 + g + r) * pr_.q_dim, 1, pr_.q_dim,
                                                  kv.row(b, hk, j0 + c), kv.inner_stride(), pr_.k_dim, buf_);
        }
      }
    }

   private:
    const Base& base_;
    const keys& k_;
    const problem& pr_;
    std::size_t bq_, n_ = 0, i0_ = 0;
    Acc scale_ = 1;
    bool only_ = false;                // the score is the product (record::separated::product_only)
    std::vector<char> qfail_, kfail_;  // the block's rows and the tile's keys failing a row guard
    kernel::row_prefetch also_;
    std::optional<pair_program_runner<Acc>> pairs_;
    row_runner<Acc> rows_;
    kernel::aligned_vector<Acc> q_;  // the block's features, n apart
    std::vector<Acc> qs_, raw_;      // its scalars (scalar c of row t at c · bq + t), its raw rows
    std::vector<Acc> qm_;            // its feature map's values, row by row
    std::optional<feature_map_runner<Acc>> map_;
    kernel::aligned_vector<Acc> msum_;  // the tile's feature map sums
    kernel::aligned_vector<Acc> kbuf_;  // a key block's scalars
    std::vector<S> buf_;
    key_reader<strips<Acc>> reader_;
  };

  // ---- backward ----

  struct grads {
    using P = policy_t;
    std::shared_ptr<const record::separation> sep;
    const record::separation& s;
    gradient_targets<Acc> to;
    row_program<Acc> query, key;       // the row programs, their products' matrices made
    program_rows<Acc> q, k;            // the rows' features and scalars
    row_features<Acc> dq, dk;          // the gradients at them (query_grad_width, key_grad_width)
    parameter_slots slots;             // the learnables differentiated (automatic_slots)
    std::vector<std::size_t> slot_of;  // the slot of each of the record's parameters (npos: none)
    std::vector<Acc> param_parts;      // (tasks, slots): the per-pair parameters' gradients per task

    grads(std::shared_ptr<const record::separation> from, const Base& base, const problem& pr,
          const backward_schedule& bs, const gradient_targets<Acc>& t)
        : sep(std::move(from)),
          s(*sep),
          to(t),
          query(s.parts.query, s.parts.query_linear),
          key(s.parts.key, s.parts.key_linear),
          slots(automatic_slots(base.policy)) {
      const record::separated& p = s.parts;
      q = program_rows<Acc>(pr.batch, pr.q_heads, pr.q_len, p.features, query_values(p));
      k = program_rows<Acc>(pr.batch, pr.kv_heads, pr.kv_len, p.features, key_values(p));
      dq = row_features<Acc>(pr.batch, pr.q_heads, pr.q_len, query_grad_width(p, pr));
      dk = row_features<Acc>(pr.batch, pr.kv_heads, pr.kv_len, key_grad_width(p, pr));
      for (const void* a : p.params) slot_of.push_back(slots.find(a));
      param_parts.assign(bs.tasks * slots.size(), Acc(0));
    }

    void build(const Base& base, const problem& pr) {
      run_program_rows(query, base.q.view, pr.q_dim, q);
      run_program_rows(key, base.k.view, pr.k_dim, k);
    }
    strided_view<Acc> query_grads() { return dq.view(); }
    void reduce_row(std::size_t, std::size_t, std::size_t, std::size_t) {}
    Acc* task_parameters(std::size_t id) { return param_parts.data() + id * slots.size(); }

    /// After the tasks: the parameters' gradients into g, then dQ and dK through the row programs
    /// in reverse, block by block (each block's parameter gradients summed in block order).
    template <class G>
    void finish(const Base& base, const problem& pr, const backward_schedule& bs, G& g) {
      std::vector<double> dp(slots.size(), 0.0);
      for (std::size_t t = 0; t < bs.tasks; ++t)
        for (std::size_t n = 0; n < slots.size(); ++n) dp[n] += double(param_parts[t * slots.size() + n]);
      kernel::trace::note(kernel::tile_op{kernel::operation::project_back});
      back(query, base.q.view, to.dq, dq, pr.q_dim, query_scalars_at(s.parts), query_raw_at(s.parts), bs.threads, dp);
      back(key, base.k.view, to.dk, dk, pr.k_dim, key_scalars_at(s.parts), key_raw_at(s.parts), bs.threads, dp);
      if constexpr (learns_automatically<P>())
        for (std::size_t n = 0; n < dp.size(); ++n) g.d[n] += dp[n];
    }

   private:
    /// Rows of x (d elements) get their gradients from df's rows (features, then the scalars from
    /// scalars_at, then the raw row's from raw_at when there are guards) through rp in reverse;
    /// each block's parameter gradients (and its product's matrix's) summed in block order.
    template <class View>
    void back(const row_program<Acc>& rp, const View& x, const strided_view<Acc>& dx, const row_features<Acc>& df,
              std::size_t d, std::size_t scalars_at, std::size_t raw_at, [[maybe_unused]] int threads,
              std::vector<double>& dp) {  // threads: OpenMP builds only
      if (!dx.data) return;
      const record::program& p = *rp.p;
      const auto& sh = df.term_at.shape;
      const std::size_t rows = sh[0] * sh[1] * sh[2], lanes = row_lanes<Acc>(rp.split->others), n = s.parts.features;
      const std::size_t blocks = (rows + lanes - 1) / lanes, np = s.parts.params.size(), nm = rp.m.size();
      const bool raw = s.parts.guarded();
      std::vector<double> parts(blocks * np, 0.0), mparts(blocks * nm, 0.0);
#pragma omp parallel num_threads(threads) if (threads > 1)
      {
        row_runner<Acc> run;
        std::vector<const Acc*> from(lanes);
        std::vector<Acc*> to(lanes);
#pragma omp for schedule(static)
        for (std::size_t blk = 0; blk < blocks; ++blk) {
          const std::size_t r0 = blk * lanes, count = std::min(lanes, rows - r0);
          for (std::size_t l = 0; l < count; ++l) {
            const std::size_t r = r0 + l, b = r / sh[2] / sh[1], h = r / sh[2] % sh[1], j = r % sh[2];
            from[l] = df.row(b, h, j);
            to[l] = dx.row(b, h, j);
          }
          run.forward(rp, count, lanes, [&](std::size_t l, Acc* dst) {
            const std::size_t r = r0 + l;
            kernel::scaled_copy(x.row(r / sh[2] / sh[1], r / sh[2] % sh[1], r % sh[2]), x.inner_stride(), d, Acc(1),
                                dst, 1);
          });
          for (std::size_t o = 0; o < p.outputs.size(); ++o) {
            Acc* seed = run.seeds(rp, o);
            const std::size_t at = o < n ? o : scalars_at + (o - n);
            for (std::size_t l = 0; l < count; ++l) seed[l] = from[l][at];
            std::fill(seed + count, seed + lanes, Acc(0));
          }
          // every element written (a feature the code never reads has gradient 0), then the program's added
          const std::ptrdiff_t stride = dx.inner_stride();
          for (std::size_t l = 0; l < count; ++l)
            for (std::size_t e = 0; e < d; ++e) to[l][std::ptrdiff_t(e) * stride] = raw ? from[l][raw_at + e] : Acc(0);
          const auto store = [&](std::size_t slot, const Acc* grad) {
            for (std::size_t l = 0; l < count; ++l) to[l][std::ptrdiff_t(slot) * stride] += grad[l];
          };
          run.reverse(rp, count, store, std::span<double>(parts.data() + blk * np, np),
                      std::span<double>(mparts.data() + blk * nm, nm));
        }
      }
      std::vector<double> dparams(np, 0.0), dm(nm, 0.0);
      for (std::size_t blk = 0; blk < blocks; ++blk) {
        for (std::size_t i = 0; i < np; ++i) dparams[i] += parts[blk * np + i];
        for (std::size_t e = 0; e < nm; ++e) dm[e] += mparts[blk * nm + e];
      }
      rp.matrix_backward(dm, dparams);
      for (std::size_t i = 0; i < np; ++i)
        if (slot_of[i] != parameter_slots::npos) dp[slot_of[i]] += dparams[i];
    }
  };

  class grad_tiles {
   public:
    grad_tiles(const Base& base, const problem& pr, grads& g, const backward_schedule& bs, Acc scale)
        : base_(base), pr_(pr), g_(g), scale_(scale), bq_(bs.block_q), lds_(simd::padded<Acc>(bs.block_k)) {
      const record::separated& s = g.s.parts;
      if (s.features) products_.emplace(s.features, bs, true, g.dq.width());
      only_ = s.product_only();
      if (!only_) pairs_.emplace(s);
      map_.emplace(s);
      if (!map_->empty()) msum_.resize(bq_ * lds_);
      dot_.resize(bq_ * lds_);
      gt_.resize(bq_ * lds_);
      dks_.resize(s.key_scalars * lds_);
      dkey_.resize(s.key_scalars * lds_);
      dparams_.resize(g.slots.size());
      if (s.guarded()) {
        qraw_.resize(bq_ * pr.q_dim);
        kraw_.resize(bs.block_k * pr.k_dim);
        dkraw_.resize(bs.block_k * pr.k_dim);
        failed_.resize(bq_ * lds_);
      }
    }

    void begin_task() { std::fill(dparams_.begin(), dparams_.end(), Acc(0)); }
    void load_keys(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
      if (products_) products_->load_keys(g_.k.f.view(), b, hk, j0, cols);
      b_ = b, hk_ = hk, j0_ = j0;
      std::fill(dks_.begin(), dks_.end(), Acc(0));
      const record::separated& s = g_.s.parts;
      if (!map_->empty()) {
        map_->load_keys(
            [&](std::size_t t, std::size_t g) { return g_.k.scalar(s.key_scalars + g * s.map_key + t, b, hk, j0); },
            cols);
        map_->clear_key_grads();
      }
      for (std::size_t c = 0; c < s.key_scalars; ++c) {  // the block's scalars, lds_ wide
        const Acc* from = g_.k.scalar(c, b, hk, j0);
        std::copy(from, from + cols, dkey_.data() + c * lds_);
        std::fill(dkey_.data() + c * lds_ + cols, dkey_.data() + (c + 1) * lds_, Acc(0));
      }
      std::fill(dkraw_.begin(), dkraw_.end(), Acc(0));
      cols_ = cols;
      kraw_loaded_ = false;
      keys_fail_ = false;
      if (only_ && s.guarded()) {
        kfail_.resize(cols);
        for (std::size_t c = 0; c < cols; ++c) {
          kfail_[c] = !row_holds(s.key_guards, [&](std::size_t g) { return dkey_[g * lds_ + c]; });
          keys_fail_ = keys_fail_ || kfail_[c];
        }
      }
      if (!only_) load_raw_keys();
    }
    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t) {
      if (products_) products_->load_queries(g_.q.f.view(), b, h, i0, rows);
      h_ = h, i0_ = i0, rows_ = rows;
      qraw_loaded_ = false;
      rows_fail_ = false;
      const record::separated& s = g_.s.parts;
      if (only_ && s.guarded()) {
        qfail_.resize(rows);
        for (std::size_t r = 0; r < rows; ++r) {
          qfail_[r] = !row_holds(s.query_guards, [&](std::size_t g) { return *g_.q.scalar(g, b, h, i0 + r); });
          rows_fail_ = rows_fail_ || qfail_[r];
        }
      }
      if (!only_) load_raw_queries();
    }

    /// Whether this tile may take P and dS from the products' epilogues: the score is the product
    /// and no row of it fails a guard.
    bool plain() const noexcept { return only_ && !rows_fail_ && !keys_fail_; }
    /// The tile's products through an epilogue (plain tiles).
    template <class Epi>
    void product(std::size_t colsp, Acc* s, std::size_t lds, const Epi& epi) {
      products_->product(colsp, s, lds, kernel::every_column{}, epi);
      tile_fails_ = false;
    }

    /// scale · score of the tile's rows; the product kept for the gradients.
    template <class Range>
    void scores(std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds, Range range) {
      if (products_)
        products_->scores(cols, colsp, s, lds, range);
      else
        for (std::size_t r = 0; r < rows_; ++r) std::fill(s + r * lds, s + r * lds + colsp, Acc(0));
      if (only_) return product_scores(cols, colsp, s, lds);
      for (std::size_t r = 0; r < rows_; ++r) std::copy(s + r * lds, s + r * lds + colsp, dot_.data() + r * lds_);
      if (!map_->empty())
        for (std::size_t r = 0; r < rows_; ++r) map_->sum(query_map(r), colsp, msum_.data() + r * lds_);
      const std::size_t R = pair_program_runner<Acc>::rows_at_once(lds_), ld = lanes(colsp);
      for (std::size_t g = 0; g < rows_; g += R) {
        const std::size_t n = std::min(R, rows_ - g);
        run_rows(g, n, ld);
        const Acc* out = pairs_->score();
        for (std::size_t r = 0; r < n; ++r) {
          Acc* row = s + (g + r) * lds;
          const Acc* o = out + r * ld;
          for (std::size_t c = 0; c < colsp; c += simd::width<Acc>)
            simd::store(row + c, simd::load(o + c) * simd::batch<Acc>(scale_));
          if (!pairs_->guarded()) continue;
          char* failed = failed_.data() + (g + r) * lds_;
          std::fill(failed, failed + cols, char(0));
          if (pairs_->any_fails(r * ld, colsp))
            for (std::size_t c = 0; c < cols; ++c)
              if ((failed[c] = !pairs_->holds(r * ld + c)))
                row[c] = scale_ * policy_score<Acc, S>(base_.policy, qraw_.data() + (g + r) * pr_.q_dim, 1, pr_.q_dim,
                                                       kraw_.data() + c * pr_.k_dim, 1, pr_.k_dim, buf_);
        }
      }
    }

    template <class RowRange, class KeyRange>
    void gradients(const Acc* ds, std::size_t lds, std::size_t cols, std::size_t colsp, Acc* dq, RowRange rows,
                   KeyRange keys) {
      const record::separated& s = g_.s.parts;
      const std::size_t ldq = g_.dq.width(), qs_at = query_scalars_at(s);
      if (only_ && !tile_fails_) return products_->gradients(ds, lds, cols, dq, rows, keys);
      if (only_) {  // the gradient at the products is dS; the pairs failing a guard on the tape
        for (std::size_t r = 0; r < rows_; ++r) {
          Acc* to = gt_.data() + r * lds_;
          std::copy(ds + r * lds, ds + r * lds + colsp, to);
          for (std::size_t c = 0; c < cols; ++c)
            if (failed_[r * lds_ + c]) to[c] = 0;
          tape_failed(r, ds + r * lds, cols, dq + r * ldq);
        }
        products_->gradients(gt_.data(), lds_, cols, dq, rows, keys);
        return;
      }
      const std::size_t R = pair_program_runner<Acc>::rows_at_once(lds_), ld = lanes(colsp);
      constexpr std::size_t w = simd::width<Acc>;
      using B = simd::batch<Acc>;
      seed_.resize(R * lds_);
      for (std::size_t g = 0; g < rows_; g += R) {
        const std::size_t n = std::min(R, rows_ - g);
        for (std::size_t r = 0; r < n; ++r) {
          Acc* seed = seed_.data() + r * ld;
          std::copy(ds + (g + r) * lds, ds + (g + r) * lds + colsp, seed);
          std::fill(seed + colsp, seed + ld, Acc(0));
          if (pairs_->guarded())
            for (std::size_t c = 0; c < cols; ++c)
              if (failed_[(g + r) * lds_ + c]) seed[c] = 0;  // on the tape below
        }
        run_rows(g, n, ld);
        pairs_->reverse(seed_.data());
        const auto& m = pairs_->values();
        for (std::uint32_t i = 0; i < s.pair.size(); ++i) {
          const record::node& x = s.pair.code[i];
          const bool input = x.o == record::op::input;
          if (!input && !(x.o == record::op::param && g_.slot_of[x.a] != parameter_slots::npos)) continue;
          const Acc* a = m.adjoint(i);
          if (input && x.a == 0) {  // the product's
            for (std::size_t r = 0; r < n; ++r) std::copy(a + r * ld, a + r * ld + colsp, gt_.data() + (g + r) * lds_);
          } else if (input && x.a <= s.query_scalars) {
            for (std::size_t r = 0; r < n; ++r) dq[(g + r) * ldq + qs_at + x.a - 1] += row_sum(a + r * ld, colsp);
          } else if (input && x.a == 1 + s.query_scalars + s.key_scalars) {  // the feature map's sum
            for (std::size_t r = 0; r < n; ++r) {
              mparams_.assign(s.params.size(), 0.0);
              map_->begin_row();
              map_->backward(query_map(g + r), colsp, a + r * ld, mparams_);
              map_->end_row(dq + (g + r) * ldq + qs_at + s.query_scalars);
              for (std::size_t i = 0; i < mparams_.size(); ++i)
                if (g_.slot_of[i] != parameter_slots::npos) dparams_[g_.slot_of[i]] += Acc(mparams_[i]);
            }
          } else if (input) {
            Acc* to = dks_.data() + (x.a - 1 - s.query_scalars) * lds_;
            for (std::size_t c = 0; c < colsp; c += w) {
              B sum = simd::load(to + c);
              for (std::size_t r = 0; r < n; ++r) sum += B::load_unaligned(a + r * ld + c);
              simd::store(to + c, sum);
            }
          } else {
            Acc sum = 0;
            for (std::size_t r = 0; r < n; ++r) sum += row_sum(a + r * ld, colsp);
            dparams_[g_.slot_of[x.a]] += sum;
          }
        }
        if (pairs_->guarded())
          for (std::size_t r = g; r < g + n; ++r) tape_failed(r, ds + r * lds, cols, dq + r * ldq);
      }
      if (products_) products_->gradients(gt_.data(), lds_, cols, dq, rows, keys);
    }

    void store_keys(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
      const record::separated& s = g_.s.parts;
      if (products_) products_->store_keys(g_.dk.view(), b, hk, j0, cols);
      for (std::size_t c = 0; c < cols; ++c) {
        Acc* row = g_.dk.row(b, hk, j0 + c);
        for (std::size_t e = 0; e < s.key_scalars; ++e) row[key_scalars_at(s) + e] = dks_[e * lds_ + c];
        for (std::size_t g = 0; g < s.map_features; ++g)
          for (std::size_t t = 0; t < s.map_key; ++t)
            row[key_scalars_at(s) + s.key_scalars + g * s.map_key + t] = map_->key_grad(t, g, c);
        if (!dkraw_.empty())
          for (std::size_t e = 0; e < pr_.k_dim; ++e) row[key_raw_at(s) + e] = dkraw_[c * pr_.k_dim + e];
      }
    }
    void end_task(std::size_t id) { std::copy(dparams_.begin(), dparams_.end(), g_.task_parameters(id)); }

   private:
    /// The scores when they are the products (scale · s); the pairs of rows failing a guard by the
    /// policy, marked for the gradients.
    void product_scores(std::size_t cols, std::size_t colsp, Acc* s, std::size_t lds) {
      const record::separated& sp = g_.s.parts;
      const simd::batch<Acc> scale(scale_);
      for (std::size_t r = 0; r < rows_; ++r)
        for (std::size_t c = 0; c < colsp; c += simd::width<Acc>)
          simd::store(s + r * lds + c, simd::load(s + r * lds + c) * scale);
      tile_fails_ = sp.guarded() && (rows_fail_ || keys_fail_);
      if (!tile_fails_) return;
      load_raw_queries();
      load_raw_keys();
      for (std::size_t r = 0; r < rows_; ++r) {
        char* failed = failed_.data() + r * lds_;
        for (std::size_t c = 0; c < cols; ++c)
          if ((failed[c] = qfail_[r] || kfail_[c]))
            s[r * lds + c] = scale_ * policy_score<Acc, S>(base_.policy, qraw_.data() + r * pr_.q_dim, 1, pr_.q_dim,
                                                           kraw_.data() + c * pr_.k_dim, 1, pr_.k_dim, buf_);
      }
    }
    /// The raw rows of the loaded query block and key block, for the policy's own scores (once).
    void load_raw_queries() {
      if (qraw_.empty() || qraw_loaded_) return;
      const auto& qv = base_.q.view;
      for (std::size_t r = 0; r < rows_; ++r)
        kernel::scaled_copy(qv.row(b_, h_, i0_ + r), qv.inner_stride(), pr_.q_dim, Acc(1), qraw_.data() + r * pr_.q_dim,
                            1);
      qraw_loaded_ = true;
    }
    void load_raw_keys() {
      if (kraw_.empty() || kraw_loaded_) return;
      const auto& kv = base_.k.view;
      for (std::size_t c = 0; c < cols_; ++c)
        kernel::scaled_copy(kv.row(b_, hk_, j0_ + c), kv.inner_stride(), pr_.k_dim, Acc(1),
                            kraw_.data() + c * pr_.k_dim, 1);
      kraw_loaded_ = true;
    }
    /// Lanes per tile row: lds_ when several rows run at once, else the row's whole batches.
    std::size_t lanes(std::size_t colsp) const {
      return pair_program_runner<Acc>::rows_at_once(lds_) > 1 ? lds_ : colsp;
    }
    /// The per-pair program on tile rows [g, g + n) (the products kept by scores()), ld lanes each.
    void run_rows(std::size_t g, std::size_t n, std::size_t ld) {
      const auto query_scalar = [&](std::size_t c, std::size_t r) { return *g_.q.scalar(c, b_, h_, i0_ + g + r); };
      const auto key_scalar = [&](std::size_t c) { return dkey_.data() + c * lds_; };
      pairs_->run(dot_.data() + g * lds_, n, ld, query_scalar, key_scalar, msum_.data() + g * lds_);
    }
    /// Tile row r's feature map values, feature by feature.
    const Acc* query_map(std::size_t r) {
      const record::separated& s = g_.s.parts;
      const std::size_t m = s.map_features * s.map_query;
      qmap_.resize(m);
      for (std::size_t c = 0; c < m; ++c) qmap_[c] = *g_.q.scalar(s.query_scalars + c, b_, h_, i0_ + r);
      return qmap_.data();
    }
    static Acc row_sum(const Acc* a, std::size_t n) {
      simd::batch<Acc> s(Acc(0));
      for (std::size_t c = 0; c < n; c += simd::width<Acc>) s += simd::load(a + c);
      return simd::hsum(s);
    }
    /// Tile row r's pairs whose guards fail, back through the policy on the tape.
    void tape_failed(std::size_t r, const Acc* d, std::size_t cols, Acc* dq_row) {
      const std::size_t raw_at = query_raw_at(g_.s.parts);
      for (std::size_t c = 0; c < cols; ++c)
        if (failed_[r * lds_ + c] && d[c] != Acc(0)) {
          tmp_.assign(pr_.q_dim, Acc(0));
          pair_backward(base_.policy, std::span<const Acc>(qraw_.data() + r * pr_.q_dim, pr_.q_dim),
                        std::span<const Acc>(kraw_.data() + c * pr_.k_dim, pr_.k_dim), d[c], std::span<Acc>(tmp_),
                        std::span<Acc>(dkraw_.data() + c * pr_.k_dim, pr_.k_dim), g_.slots, std::span<Acc>(dparams_));
          for (std::size_t e = 0; e < pr_.q_dim; ++e) dq_row[raw_at + e] += tmp_[e];
        }
    }

    const Base& base_;
    const problem& pr_;
    grads& g_;
    Acc scale_;
    std::size_t bq_, lds_, b_ = 0, hk_ = 0, j0_ = 0, h_ = 0, i0_ = 0, rows_ = 0;
    std::size_t cols_ = 0;
    bool only_ = false;                // the score is the product (record::separated::product_only)
    std::vector<char> qfail_, kfail_;  // the query block's rows and the key block's keys failing a row guard
    bool rows_fail_ = false, keys_fail_ = false, tile_fails_ = false;
    bool qraw_loaded_ = false, kraw_loaded_ = false;
    std::optional<dot_grads<Acc>> products_;
    std::optional<pair_program_runner<Acc>> pairs_;
    std::optional<feature_map_runner<Acc>> map_;
    kernel::aligned_vector<Acc> msum_;  // the tile's feature map sums
    std::vector<Acc> qmap_;
    std::vector<double> mparams_;
    kernel::aligned_vector<Acc> dot_, gt_;           // the tile's products, and the gradient at them
    kernel::aligned_vector<Acc> dks_, dkey_, seed_;  // the key scalars' gradient and values, lds_ wide
    std::vector<Acc> dparams_, qraw_, kraw_, dkraw_, tmp_;
    std::vector<char> failed_;  // pairs whose guards fail, scored by the policy
    std::vector<S> buf_;
  };
};

}  // namespace xattn
