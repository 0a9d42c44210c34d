#pragma once
// rope(Q, positions[, options]): rotary position embeddings on a terminal, applied by the score
// path as it loads queries and packs keys (no rotated copy of the operand). Semantics are HF
// transformers' apply_rotary_pos_emb: rope_style::half rotates (k, k + dims/2), as LLaMA and
// GPT-NeoX; rope_style::interleaved rotates (2k, 2k + 1), as GPT-J. Angles are the float product
// position · inv_freq[k] (kernel/rope.hpp).
#include "../error.hpp"
#include "../kernel/rope.hpp"
#include "../policy/broadcast.hpp"
#include "tensor_ref.hpp"

#include <xtensor/xtensor.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
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
};

/// A terminal whose rows the score path rotates: the operand as ref() sees it, and its rotation.
template <class T, std::size_t Rank, bool Packed = false>
struct rotary_ref : expr_base<rotary_ref<T, Rank, Packed>> {
  using value_type = T;
  static constexpr std::size_t rank = Rank;
  static constexpr bool packed = Packed;

  strided_view<const T> view;
  form how = form::bhsd;
  std::shared_ptr<const void> owned;
  rotary rot;

  std::vector<std::size_t> user_shape() const { return in_form(how, view.at.shape).user_shape; }
};

template <class E>
inline constexpr bool is_rotary_v = false;
template <class T, std::size_t R, bool P>
inline constexpr bool is_rotary_v<rotary_ref<T, R, P>> = true;

namespace detail {

template <class T, std::size_t R, bool P>
rotary_ref<T, R, P> rotated(const tensor_ref<T, R, P>& t, rotary rot) {
  return {{}, t.view, t.how, t.owned, std::move(rot)};
}

}  // namespace detail

/// rope(X, positions[, options]): X = ref(...) or heads(...); positions (S) or (B, S), any integer type.
template <class T, std::size_t R, bool P, xtensor_expression E>
auto rope(const tensor_ref<T, R, P>& x, E&& positions, rope_options options = {}) {
  static_assert(std::is_integral_v<std::remove_cv_t<typename std::decay_t<E>::value_type>>,
                "xattn: rope(X, positions): positions must hold integers");
  return detail::rotated(x, {make_nd_ref<std::int64_t>(std::forward<E>(positions)), 0, std::move(options)});
}

/// rope(X, offset[, options]): rows at positions offset, offset + 1, ... (decoding from a cache).
template <class T, std::size_t R, bool P, class I>
requires std::is_integral_v<I>
auto rope(const tensor_ref<T, R, P>& x, I offset, rope_options options = {}) {
  return detail::rotated(x, {{}, std::int64_t(offset), std::move(options)});
}

}  // namespace xattn
