#pragma once
// Score path dot_rotary: S = rope(Q) · rope(K)ᵀ (`rope(Q, pos) * trans(rope(K, pos))`, either side
// rotated). Forward: each key block rotated as it is packed into a panel (once per evaluation, or
// per head by the thread using it; never read in place), each query row rotated as a task loads
// it, scale folded in. Backward: the products of rows (parts/dot_grads.hpp) on the rotated rows,
// their gradients taken back through the rotation at the end (its transpose), into dQ and dK.
#include "../../form.hpp"
#include "../../kernel/aligned.hpp"
#include "../../kernel/qk.hpp"
#include "../../kernel/rows.hpp"
#include "../operands/key_panels.hpp"
#include "../operands/rotated_rows.hpp"
#include "../plan/schedule.hpp"
#include "parts/common.hpp"
#include "parts/dot_grads.hpp"

#include <string_view>

namespace xattn {

template <class Acc, class Base>
struct dot_rotary_path {
  static constexpr std::string_view name = "dot_rotary";
  static constexpr std::string_view what = "Q·Kᵀ of the rotated operands (rope) by the score microkernel";
  using q_rows = rotated_rows<Acc, std::decay_t<decltype(std::declval<Base>().q)>>;
  using k_rows = rotated_rows<Acc, std::decay_t<decltype(std::declval<Base>().k)>>;

  static constexpr bool plain_products = true;
  static path_facts facts(const Base& base, const problem& pr) {
    path_facts f = dot_facts<Acc>(pr.q_dim);
    f.keys_in_place_ok = false;  // a key is rotated once, as it is packed
    f.plain_products = plain_products;
    f.query_grads_dense = base.q.how != form::packed;
    return f;
  }
  static constexpr kernel::tile_op score_op(key_reads) { return kernel::tile_op::qk_tile; }
  static constexpr kernel::tile_op key_pack_op = kernel::tile_op::pack_kt;
  static constexpr std::string_view key_work = "rotated (rope) as they are packed";
  static constexpr op_list key_ops{}, query_ops{};
  static constexpr backward_steps backward_ops{
      {},
      {kernel::tile_op::pack_kt, kernel::tile_op::pack_strips},
      {kernel::tile_op::qk_tile},
      {kernel::tile_op::pack_strips, kernel::tile_op::pv_tile_transposed_strips, kernel::tile_op::pv_tile_strips},
      {}};

  // ---- forward ----

  /// Both operands' rotation tables, and the keys packed rotated when the schedule packs them once.
  struct keys {
    q_rows q;
    k_rows k;
    key_panels<strips<Acc>> panels;
    std::size_t bk;
    keys(const Base& base, const problem& pr, const forward_schedule& fs)
        : q(base.q, pr.batch, pr.q_len, pr.q_dim), k(base.k, pr.batch, pr.kv_len, pr.k_dim), bk(fs.block_k) {
      if (fs.keys == key_reads::panels) panels = make_key_panels<strips<Acc>>(pr, pr.q_dim, fs.block_k);
    }
    /// Called by every thread of the pass's parallel region.
    void build(const Base& base, const problem& pr) {
      q.build(base.q);
      k.build(base.k);
      if (panels.empty()) return;
      std::vector<Acc> block(bk * std::max<std::size_t>(pr.k_dim, 1));  // this thread's rotated key block
      pack_key_panels(panels, pr, 1, [&](std::size_t bb, std::size_t h, std::size_t j) {
        Acc* row = block.data() + (j % bk) * pr.k_dim;
        k.load(base.k, bb, h, j, Acc(1), row);
        return static_cast<const Acc*>(row);
      });
    }
  };

  /// One per thread: the task's queries, rotated and scaled.
  class tiles {
   public:
    tiles(const Base& base, const problem& pr, const keys& k, const forward_schedule& fs)
        : base_(base),
          keys_(k),
          n_(pr.q_dim),
          bk_(fs.block_k),
          q_(fs.block_q * std::max<std::size_t>(n_, 1)),
          block_(bk_ * std::max<std::size_t>(n_, 1)),
          reader_(k.panels, pr, n_, fs) {}

    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, Acc scale, std::size_t at = 0) {
      if (at == 0) i0_ = i0;
      for (std::size_t r = 0; r < rows; ++r) keys_.q.load(base_.q, b, h, i0 + r, scale, q_.data() + (at + r) * n_);
    }

    void scores(std::size_t b, std::size_t, std::size_t hk, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t, std::size_t colsp, Acc* s, std::size_t lds) {
      const Acc* kt = reader_.panel(b, hk, j0, 1, [&](std::size_t j) {
        Acc* row = block_.data() + (j % bk_) * n_;
        keys_.k.load(base_.k, b, hk, j, Acc(1), row);
        return static_cast<const Acc*>(row);
      });
      kernel::qk_tile(q_.data() + (i0 - i0_) * n_, n_, rows, kt, n_, colsp, s, lds);
    }

   private:
    const Base& base_;
    const keys& keys_;
    std::size_t n_, bk_, i0_ = 0;
    kernel::aligned_vector<Acc> q_, block_;
    key_reader<strips<Acc>> reader_;
  };

  // ---- backward ----

  /// dQ and dK are the results, in the rotated rows' coordinates until finish() turns them back.
  struct grads {
    gradient_targets<Acc> to;
    q_rows q;
    k_rows k;
    grads(const Base& base, const problem& pr, const backward_schedule&, const gradient_targets<Acc>& t)
        : to(t), q(base.q, pr.batch, pr.q_len, pr.q_dim), k(base.k, pr.batch, pr.kv_len, pr.k_dim) {}
    void build(const Base& base, const problem&) {
      q.build(base.q);
      k.build(base.k);
    }
    strided_view<Acc> query_grads() const { return to.dq; }
    void reduce_row(std::size_t, std::size_t, std::size_t, std::size_t) {}
    template <class G>
    void finish(const Base& base, const problem& pr, const backward_schedule&, G&) {
      for (std::size_t b = 0; b < pr.batch; ++b) {
        for (std::size_t h = 0; h < pr.q_heads; ++h)
          for (std::size_t i = 0; i < pr.q_len; ++i)
            q.transpose(base.q, to.dq.row(b, h, i), to.dq.inner_stride(), b, i);
        for (std::size_t h = 0; h < pr.kv_heads; ++h)
          for (std::size_t j = 0; j < pr.kv_len; ++j)
            k.transpose(base.k, to.dk.row(b, h, j), to.dk.inner_stride(), b, j);
      }
    }
  };

  /// One per thread: rows rotated into blocks of their own, then the products of rows.
  class grad_tiles {
   public:
    grad_tiles(const Base& base, const problem& pr, grads& g, const backward_schedule& bs, Acc scale)
        : base_(base),
          g_(g),
          n_(pr.q_dim),
          dot_(pr.q_dim, bs),
          kb_(bs.block_k * std::max<std::size_t>(n_, 1)),
          qb_(bs.block_q * std::max<std::size_t>(n_, 1)),
          scale_(scale) {}

    void begin_task() {}
    void load_keys(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
      for (std::size_t c = 0; c < cols; ++c) g_.k.load(base_.k, b, hk, j0 + c, Acc(1), kb_.data() + c * n_);
      dot_.load_keys(block_view(kb_, cols), 0, 0, 0, cols);
    }
    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t) {
      for (std::size_t r = 0; r < rows; ++r) g_.q.load(base_.q, b, h, i0 + r, Acc(1), qb_.data() + r * n_);
      dot_.load_queries(block_view(qb_, rows), 0, 0, 0, rows);
      rows_ = rows;
    }
    template <class Range>
    void scores(std::size_t, std::size_t colsp, Acc* s, std::size_t lds, Range range) {
      dot_.product(colsp, s, lds, range);
      for (std::size_t r = 0; r < rows_; ++r) kernel::scale_row(s + r * lds, colsp, scale_);
    }
    template <class Epi>
    void product(std::size_t colsp, Acc* s, std::size_t lds, const Epi& epi) {
      dot_.product(colsp, s, lds, kernel::every_column{}, epi);
    }
    template <class RowRange, class KeyRange>
    void gradients(const Acc* ds, std::size_t lds, std::size_t cols, std::size_t, Acc* dq, RowRange rows,
                   KeyRange keys) {
      dot_.gradients(ds, lds, cols, dq, rows, keys);
    }
    void store_keys(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
      dot_.store_keys(g_.to.dk, b, hk, j0, cols);
    }
    void end_task(std::size_t) {}

   private:
    /// rows of n features, contiguous, as a (1, 1, rows, n) view
    strided_view<const Acc> block_view(const kernel::aligned_vector<Acc>& buf, std::size_t rows) const {
      return {buf.data(), {{1, 1, rows, n_}, {0, 0, std::ptrdiff_t(n_), 1}}};
    }

    const Base& base_;
    grads& g_;
    std::size_t n_;
    dot_grads<Acc> dot_;
    kernel::aligned_vector<Acc> kb_, qb_;
    Acc scale_;
    std::size_t rows_ = 0;
  };
};

}  // namespace xattn
