#pragma once
// Rows of Q or K as the rotary score path reads them: turned by their rotary embedding (rope) as
// they are loaded, from a table of every row's cosines and sines built once per evaluation, or as
// they are when the operand has none. The same table takes a row's gradient back (the transpose).
#include "../../expr/rope.hpp"
#include "../../kernel/rope.hpp"
#include "../../kernel/rows.hpp"

#include <cstddef>
#include <vector>

namespace xattn {

template <class Acc, class Term>
class rotated_rows {
 public:
  static constexpr bool rotates = is_rotary_v<Term>;

  /// Rows of d features of `batch` sequences of `seq`; the table is filled by build().
  rotated_rows(const Term& t, std::size_t batch, std::size_t seq, std::size_t d) : n_(d), seq_(seq) {
    if constexpr (rotates) {
      const rotary& r = t.rot;
      dims_ = r.dims_for(d);
      half_ = dims_ / 2;
      per_batch_ = r.positions.data && r.positions.shape.size() == 2;
      batches_ = per_batch_ ? batch : 1;
      inv_ = r.inverse_frequencies(d);
      cos_.resize(batches_ * seq * half_);
      sin_.resize(cos_.size());
    }
  }

  /// Reads other's table instead of filling its own when other turns every row by the same angles
  /// (the same frequencies and positions: Q and K of a causal self-attention). Other must outlive
  /// this and be built.
  template <class OtherTerm>
  void share(const Term& t, const rotated_rows<Acc, OtherTerm>& other, const OtherTerm& ot) {
    if constexpr (rotates && rotated_rows<Acc, OtherTerm>::rotates) {
      if (other.shared_ || other.inv_ != inv_ || other.seq_ != seq_ || other.batches_ != batches_) return;
      for (std::size_t b = 0; b < batches_; ++b)
        for (std::size_t i = 0; i < seq_; ++i)
          if (t.rot.position(b, i) != ot.rot.position(b, i)) return;
      shared_ = &other.cos_;
      shared_sin_ = &other.sin_;
      cos_ = {}, sin_ = {};
    } else {
      (void)t, (void)other, (void)ot;
    }
  }

  /// Fills the table: an orphaned `omp for`, called by every thread of a parallel region (or
  /// serially outside one).
  void build(const Term& t) {
    if constexpr (rotates) {
      if (shared_) return;
      const auto rows = std::ptrdiff_t(batches_ * seq_);
#pragma omp for schedule(static)
      for (std::ptrdiff_t r = 0; r < rows; ++r) {
        const std::size_t b = std::size_t(r) / seq_, i = std::size_t(r) % seq_;
        kernel::rope_angles(t.rot.position(b, i), inv_.data(), half_, cos_.data() + std::size_t(r) * half_,
                            sin_.data() + std::size_t(r) * half_);
      }
    } else {
      (void)t;
    }
  }

  /// out[0, n) = c · (row i of head (b, h)), rotated.
  void load(const Term& t, std::size_t b, std::size_t h, std::size_t i, Acc c, Acc* out) const {
    const auto x = t.view.row(b, h, i);
    if constexpr (rotates)
      kernel::rope_row(x, t.view.inner_stride(), n_, dims_, t.rot.options.style, cos_of(b, i), sin_of(b, i), c, out);
    else
      kernel::scaled_copy(x, t.view.inner_stride(), n_, c, out, 1);
  }

  /// g (a gradient at row i of sequence b, stride apart) taken back through the rotation.
  void transpose(const Term& t, Acc* g, std::ptrdiff_t stride, std::size_t b, std::size_t i) const {
    if constexpr (rotates)
      kernel::rope_row_transposed(g, stride, dims_, t.rot.options.style, cos_of(b, i), sin_of(b, i));
  }

 private:
  template <class, class>
  friend class rotated_rows;

  const float* cos_of(std::size_t b, std::size_t i) const {
    return (shared_ ? *shared_ : cos_).data() + ((per_batch_ ? b : 0) * seq_ + i) * half_;
  }
  const float* sin_of(std::size_t b, std::size_t i) const {
    return (shared_ ? *shared_sin_ : sin_).data() + ((per_batch_ ? b : 0) * seq_ + i) * half_;
  }

  std::size_t n_ = 0, seq_ = 0, dims_ = 0, half_ = 0, batches_ = 1;
  bool per_batch_ = false;
  std::vector<float> inv_, cos_, sin_;
  const std::vector<float>*shared_ = nullptr, *shared_sin_ = nullptr;  // another's table (share)
};

}  // namespace xattn
