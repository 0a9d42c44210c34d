#pragma once
// One thread's backward tiles of a score that is a plain product of rows, S = scale · Q·Kᵀ, on
// the rows a path's grads hold (the operands themselves, or rows assembled once per evaluation):
// the products of rows (dot_grads.hpp, or dot_pair_grads.hpp on vdpbf16ps), dK's rows written
// where the grads say.
#include "../../../kernel/rows.hpp"
#include "../../plan/schedule.hpp"
#include "dot_grads.hpp"

#include <cstddef>

namespace xattn {

/// Grads provides width(), query_rows(), key_rows() (views of rows of width() features) and
/// key_grads() (where dK's rows go); Dot: the products (dot_grads<Acc> or dot_pair_grads).
template <class Acc, class Grads, class Dot = dot_grads<Acc>>
class row_grad_tiles {
 public:
  template <class Base>
  row_grad_tiles(const Base&, const problem&, Grads& g, const backward_schedule& bs, Acc scale)
      : g_(g), dot_(g.width(), bs), scale_(scale) {}

  void begin_task() {}
  void load_keys(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
    dot_.load_keys(g_.key_rows(), b, hk, j0, cols);
  }
  void load_queries(std::size_t b, std::size_t h, std::size_t i0, std::size_t rows, std::size_t) {
    dot_.load_queries(g_.query_rows(), b, h, i0, rows);
    rows_ = rows;
  }
  /// scale · Q·Kᵀ, rows of the tile (register blocks outside range are 0).
  template <class Range>
  void scores(std::size_t, std::size_t colsp, Acc* s, std::size_t lds, Range range) {
    dot_.product(colsp, s, lds, range);
    for (std::size_t r = 0; r < rows_; ++r) kernel::scale_row(s + r * lds, colsp, scale_);
  }
  /// Q·Kᵀ through an epilogue (whole tiles of plain products).
  template <class Epi>
  void product(std::size_t colsp, Acc* s, std::size_t lds, const Epi& epi) {
    dot_.product(colsp, s, lds, kernel::every_column{}, epi);
  }
  template <class RowRange, class KeyRange>
  void gradients(const Acc* ds, std::size_t lds, std::size_t cols, std::size_t, Acc* dq, RowRange rows, KeyRange keys) {
    dot_.gradients(ds, lds, cols, dq, rows, keys);
  }
  void store_keys(std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols) {
    dot_.store_keys(g_.key_grads(), b, hk, j0, cols);
  }
  void end_task(std::size_t) {}

 private:
  Grads& g_;
  Dot dot_;
  Acc scale_;
  std::size_t rows_ = 0;
};

}  // namespace xattn
