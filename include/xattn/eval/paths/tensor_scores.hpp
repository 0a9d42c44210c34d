#pragma once
// Score path tensor: the scores are given as a tensor X (d2l's masked_softmax(X, valid_lens)).
// Forward: a tile is X's block, converted and times the scale. Backward: the same block, and dS
// written into X's gradient.
#include "../../kernel/rows.hpp"
#include "../../simd/compat.hpp"
#include "../plan/schedule.hpp"
#include "parts/common.hpp"

#include <string_view>

namespace xattn {

template <class Acc, class Base>
struct tensor_scores_path {
  static constexpr std::string_view name = "tensor";
  static constexpr std::string_view what = "the scores read from the tensor X";

  static constexpr bool plain_products = false;
  static path_facts facts(const Base&, const problem&) { return pair_facts<Acc>(0); }
  static constexpr kernel::tile_op score_op(const forward_schedule&) {
    return kernel::tile_op{kernel::operation::tensor_scores};
  }
  static constexpr kernel::tile_op key_pack_op{};  // no panels
  static constexpr std::string_view key_work = "";
  static constexpr op_list key_ops{}, query_ops{};
  static constexpr backward_steps backward_ops{{},
                                               {},
                                               {kernel::tile_op{kernel::operation::tensor_scores}},
                                               {kernel::tile_op{kernel::operation::tensor_gradients}},
                                               {}};

  // ---- forward ----

  struct keys {
    keys(const Base&, const problem&, const forward_schedule&) {}
    void build(const Base&, const problem&) {}
  };

  class tiles {
   public:
    tiles(const Base& base, const problem&, const keys&, const forward_schedule&) : base_(base), scale_(1) {}

    /// Scores are read by (head, row) in scores(): never run with rows of several heads.
    void load_queries(std::size_t, std::size_t, std::size_t, std::size_t, Acc scale, std::size_t = 0) {
      scale_ = scale;
    }

    void scores(std::size_t b, std::size_t h, std::size_t, std::size_t i0, std::size_t rows, std::size_t j0,
                std::size_t cols, std::size_t, Acc* s, std::size_t lds) const {
      kernel::trace::note(kernel::tile_op{kernel::operation::tensor_scores});
      const auto& xv = base_.x.view;
      for (std::size_t r = 0; r < rows; ++r)
        kernel::scaled_copy(&xv(b, h, i0 + r, j0), xv.inner_stride(), cols, scale_, s + r * lds, 1);
    }

   private:
    const Base& base_;
    Acc scale_;
  };

  // ---- backward ----

  /// dX is the result itself; there are no query or key gradients.
  struct grads {
    gradient_targets<Acc> to;
    grads(const Base&, const problem&, const backward_schedule&, const gradient_targets<Acc>& t) : to(t) {}
    void build(const Base&, const problem&) {}
    strided_view<Acc> query_grads() const { return {}; }
    void reduce_row(std::size_t, std::size_t, std::size_t, std::size_t) {}
    template <class G>
    void finish(const Base&, const problem&, const backward_schedule&, G&) {}
  };

  class grad_tiles {
   public:
    grad_tiles(const Base& base, const problem&, grads& g, const backward_schedule&, Acc scale)
        : base_(base), g_(g), scale_(scale) {}

    void begin_task() {}
    void load_keys(std::size_t, std::size_t, std::size_t j0, std::size_t) { j0_ = j0; }
    void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t) {
      b0_ = b, h_ = h, i0_ = i0, rows_ = rows;
    }
    /// scale · X, rows of the tile.
    template <class Range>
    void scores(std::size_t cols, std::size_t, Acc* s, std::size_t lds, Range) {
      kernel::trace::note(kernel::tile_op{kernel::operation::tensor_scores});
      const auto& x = base_.x.view;
      for (std::size_t r = 0; r < rows_; ++r)
        kernel::scaled_copy(&x(b0_, h_, i0_ + r, j0_), x.inner_stride(), cols, scale_, s + r * lds, 1);
    }
    /// dX = dS.
    template <class RowRange, class KeyRange>
    void gradients(const Acc* ds, std::size_t lds, std::size_t cols, std::size_t, Acc*, RowRange, KeyRange) {
      kernel::trace::note(kernel::tile_op{kernel::operation::tensor_gradients});
      const auto& dx = g_.to.dx;
      for (std::size_t r = 0; r < rows_; ++r)
        kernel::scaled_copy(ds + r * lds, 1, cols, Acc(1), &dx(b0_, h_, i0_ + r, j0_), dx.inner_stride());
    }
    void store_keys(std::size_t, std::size_t, std::size_t, std::size_t) {}
    void end_task(std::size_t) {}

   private:
    const Base& base_;
    grads& g_;
    Acc scale_;
    std::size_t b0_ = 0, h_ = 0, i0_ = 0, j0_ = 0, rows_ = 0;
  };
};

}  // namespace xattn
