#pragma once
// Rotary position embeddings as a load transform (transform.hpp): rope(X, positions[, options])
// turns row i of sequence b by the angles position(b, i) · inv_freq[k]. Semantics are HF
// transformers' apply_rotary_pos_emb: rope_style::half rotates (k, k + dims/2), as LLaMA and
// GPT-NeoX; rope_style::interleaved rotates (2k, 2k + 1), as GPT-J. Angles are the float product
// position · inv_freq[k] (kernel/rope.hpp); the kernel reads them from a table built once per
// evaluation, shared by Q and K when they turn by the same angles.
#include "../../error.hpp"
#include "../../kernel/rope.hpp"
#include "../broadcast.hpp"
#include "transform.hpp"

#include <xtensor/xtensor.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace xattn {

/// How rope() turns a row: the frequencies 1 / base^(2k / dims), or a table of them (Llama 3, NTK,
/// YaRN scalings: dims / 2 floats), applied to the first dims features (0: all of them).
struct rope_options {
  float base = 10000.0f;
  std::size_t dims = 0;
  rope_style style = rope_style::half;
  xt::xtensor<float, 1> inv_freq{};
};

/// The positions and options of one rotated operand.
struct rotary {
  nd_ref<std::int64_t> positions;  // (S) or (B, S); no data: offset + i
  std::int64_t offset = 0;
  rope_options options;

  /// The rotated features for rows of d features.
  std::size_t dims_for(std::size_t d) const noexcept { return options.dims ? options.dims : d; }

  /// Checks the positions and options against an operand of `batch` sequences of `seq` rows of d.
  void check(std::size_t batch, std::size_t seq, std::size_t d, const char* who) const {
    const std::size_t dims = dims_for(d);
    if (dims % 2 != 0 || dims > d)
      fail("rope(", who, ", positions, {.dims = ", options.dims, "}): dims must be even and at most the ", d,
           " features of ", who, ", got ", dims);
    if (options.inv_freq.size() != 0 && options.inv_freq.size() != dims / 2)
      fail("rope(", who, ", positions, {.inv_freq}): inv_freq has ", options.inv_freq.size(), " entries but ", dims,
           " rotated features need ", dims / 2);
    if (!(options.base > 0) || !std::isfinite(options.base))
      fail("rope(", who, ", positions, {.base}): base must be finite and > 0, got ", options.base);
    if (!positions.data) {
      if (offset < 0) fail("rope(", who, ", offset): the offset must be >= 0, got ", offset);
      return;
    }
    const auto& s = positions.shape;
    const bool ok = (s.size() == 1 && s[0] == seq) || (s.size() == 2 && s[0] == batch && s[1] == seq);
    if (!ok)
      fail("rope(", who, ", positions): positions has shape ", shape_str(s), " but ", who, " has ", seq,
           " positions in a batch of ", batch, ": positions must be (", seq, ") or (", batch, ",", seq, ")");
    for (std::size_t b = 0; b < (s.size() == 2 ? batch : 1); ++b)
      for (std::size_t i = 0; i < seq; ++i)
        if (position(b, i) < 0) fail("rope(", who, ", positions): position ", position(b, i), " is negative");
  }

  /// inv_freq for rows of d features: the options' table, or 1 / base^(2k / dims) in float.
  std::vector<float> inverse_frequencies(std::size_t d) const {
    std::vector<float> inv(dims_for(d) / 2);
    if (options.inv_freq.size() == inv.size())
      for (std::size_t k = 0; k < inv.size(); ++k) inv[k] = options.inv_freq(k);
    else
      kernel::rope_inverse_frequencies(options.base, dims_for(d), inv.data());
    return inv;
  }

  /// The position of row i of sequence b.
  std::int64_t position(std::size_t b, std::size_t i) const noexcept {
    if (!positions.data) return offset + std::int64_t(i);
    if (positions.shape.size() == 1) return positions.data[std::ptrdiff_t(i) * positions.strides[0]];
    return positions.data[std::ptrdiff_t(b) * positions.strides[0] + std::ptrdiff_t(i) * positions.strides[1]];
  }

  static std::string name() { return "rope"; }

  /// out[0, n) = c · (x rotated at row i of sequence b): one row, its angles computed for it.
  template <class X, class S>
  void row(const X* x, std::ptrdiff_t xs, std::size_t n, std::size_t b, std::size_t i, S c, S* out) const {
    const std::vector<float> inv = inverse_frequencies(n);
    std::vector<float> cs(inv.size()), sn(inv.size());
    kernel::rope_angles(position(b, i), inv.data(), inv.size(), cs.data(), sn.data());
    kernel::rope_row(x, xs, n, 2 * inv.size(), options.style, cs.data(), sn.data(), c, out);
  }

  /// g = Rᵀ g in place at row i of sequence b.
  template <class S>
  void row_transposed(S* g, std::ptrdiff_t gs, std::size_t n, std::size_t b, std::size_t i) const {
    const std::vector<float> inv = inverse_frequencies(n);
    std::vector<float> cs(inv.size()), sn(inv.size());
    kernel::rope_angles(position(b, i), inv.data(), inv.size(), cs.data(), sn.data());
    kernel::rope_row_transposed(g, gs, 2 * inv.size(), options.style, cs.data(), sn.data());
  }

  /// Every row's cosines and sines, built once per evaluation, or read from another operand's table
  /// that turns every row by the same angles (Q and K of a causal self-attention).
  template <class Acc>
  class table {
   public:
    table(const rotary& r, std::size_t batch, std::size_t seq, std::size_t d) : seq_(seq) {
      dims_ = r.dims_for(d);
      half_ = dims_ / 2;
      per_batch_ = r.positions.data && r.positions.shape.size() == 2;
      batches_ = per_batch_ ? batch : 1;
      inv_ = r.inverse_frequencies(d);
      cos_.resize(batches_ * seq * half_);
      sin_.resize(cos_.size());
    }

    /// Reads other's table instead of filling its own when other turns every row by the same
    /// angles. Other must outlive this and be built.
    void share(const rotary& mine, const table& other, const rotary& theirs) {
      if (other.shared_ || other.inv_ != inv_ || other.seq_ != seq_ || other.batches_ != batches_) return;
      for (std::size_t b = 0; b < batches_; ++b)
        for (std::size_t i = 0; i < seq_; ++i)
          if (mine.position(b, i) != theirs.position(b, i)) return;
      shared_ = &other.cos_;
      shared_sin_ = &other.sin_;
      cos_ = {}, sin_ = {};
    }

    /// Fills the table: an orphaned `omp for`, called by every thread of a parallel region (or
    /// serially outside one).
    void build(const rotary& r) {
      if (shared_) return;
      const auto rows = std::ptrdiff_t(batches_ * seq_);
#pragma omp for schedule(static)
      for (std::ptrdiff_t k = 0; k < rows; ++k) {
        const std::size_t b = std::size_t(k) / seq_, i = std::size_t(k) % seq_;
        kernel::rope_angles(r.position(b, i), inv_.data(), half_, cos_.data() + std::size_t(k) * half_,
                            sin_.data() + std::size_t(k) * half_);
      }
    }

    template <class X>
    void load(const rotary& r, const X* x, std::ptrdiff_t xs, std::size_t n, std::size_t b, std::size_t i, Acc c,
              Acc* out) const {
      kernel::rope_row(x, xs, n, dims_, r.options.style, cos_of(b, i), sin_of(b, i), c, out);
    }

    void transpose(const rotary& r, Acc* g, std::ptrdiff_t gs, std::size_t b, std::size_t i) const {
      kernel::rope_row_transposed(g, gs, dims_, r.options.style, cos_of(b, i), sin_of(b, i));
    }

   private:
    const float* cos_of(std::size_t b, std::size_t i) const {
      return (shared_ ? *shared_ : cos_).data() + ((per_batch_ ? b : 0) * seq_ + i) * half_;
    }
    const float* sin_of(std::size_t b, std::size_t i) const {
      return (shared_ ? *shared_sin_ : sin_).data() + ((per_batch_ ? b : 0) * seq_ + i) * half_;
    }

    std::size_t seq_ = 0, dims_ = 0, half_ = 0, batches_ = 1;
    bool per_batch_ = false;
    std::vector<float> inv_, cos_, sin_;
    const std::vector<float>*shared_ = nullptr, *shared_sin_ = nullptr;  // another's table (share)
  };
};

}  // namespace xattn
