#pragma once
// Rows of Q or K as the score path reads them: turned by their load transform (rope) as they are
// loaded, through the transform's table when it has one (built once per evaluation) or row by row,
// or as they are when the operand has none. The same transform takes a row's gradient back (its
// transpose).
#include "../../expr/transformed.hpp"
#include "../../kernel/rows.hpp"

#include <cstddef>
#include <optional>
#include <vector>

namespace xattn {

template <class Acc, class Term>
class transformed_rows {
  struct none {};
  template <class T>
  struct table_of {
    using type = none;
  };
  template <class T>
  requires is_transformed_v<T> && has_transform_table<typename T::transform_type, Acc>
  struct table_of<T> {
    using type = typename T::transform_type::template table<Acc>;
  };
  using table_t = typename table_of<Term>::type;

 public:
  static constexpr bool transforms = is_transformed_v<Term>;
  static constexpr bool tabled = !std::is_same_v<table_t, none>;

  /// Rows of d features of `batch` sequences of `seq`; a table is filled by build().
  transformed_rows(const Term& t, std::size_t batch, std::size_t seq, std::size_t d) : n_(d) {
    if constexpr (tabled) table_.emplace(t.transform, batch, seq, d);
    (void)t, (void)batch, (void)seq;
  }

  /// Reads other's table instead of filling its own where the transform can tell that they turn
  /// every row alike (rope: the same frequencies and positions). Other must outlive this and be built.
  template <class OtherTerm>
  void share(const Term& t, const transformed_rows<Acc, OtherTerm>& other, const OtherTerm& ot) {
    if constexpr (std::is_same_v<table_t, typename transformed_rows<Acc, OtherTerm>::table_t> &&
                  requires { table_->share(t.transform, *other.table_, ot.transform); })
      table_->share(t.transform, *other.table_, ot.transform);
    (void)t, (void)other, (void)ot;
  }

  /// Fills the table: an orphaned `omp for`, called by every thread of a parallel region (or
  /// serially outside one).
  void build(const Term& t) {
    if constexpr (tabled) table_->build(t.transform);
    (void)t;
  }

  /// out[0, n) = c · (row i of head (b, h)), transformed.
  void load(const Term& t, std::size_t b, std::size_t h, std::size_t i, Acc c, Acc* out) const {
    const auto x = t.view.row(b, h, i);
    if constexpr (tabled) {
      table_->load(t.transform, x, t.view.inner_stride(), n_, b, i, c, out);
    } else if constexpr (transforms) {
      thread_local std::vector<Acc> row;
      row.resize(n_);
      kernel::scaled_copy(x, t.view.inner_stride(), n_, Acc(1), row.data(), 1);
      t.transform.row(row.data(), std::ptrdiff_t(1), n_, b, i, c, out);
    } else {
      kernel::scaled_copy(x, t.view.inner_stride(), n_, c, out, 1);
    }
  }

  /// g (a gradient at row i of sequence b, stride apart) taken back through the transform.
  void transpose(const Term& t, Acc* g, std::ptrdiff_t stride, std::size_t b, std::size_t i) const {
    if constexpr (tabled)
      table_->transpose(t.transform, g, stride, b, i);
    else if constexpr (transforms)
      t.transform.row_transposed(g, stride, n_, b, i);
    (void)t, (void)g, (void)stride, (void)b, (void)i;
  }

 private:
  template <class, class>
  friend class transformed_rows;

  std::size_t n_ = 0;
  std::optional<table_t> table_;
};

}  // namespace xattn
