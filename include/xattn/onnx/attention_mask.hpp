#pragma once
// The key-exclusion part of ONNX Attention as one mask policy: an optional bool attn_mask
// (True = attend), is_causal with its offset, and nonpad_kv_seqlen padding. Every part excludes
// (-inf), so a row nothing survives in gets a zero output, as ONNX's errata require. One policy
// type, whatever is present, keeps ONNX to a single kernel instantiation per layout.
#include "../policy/masks/bool_mask.hpp"
#include "../policy/masks/causal.hpp"
#include "../policy/masks/lengths.hpp"
#include "../policy/ops/bias.hpp"
#include "../policy/ops/softcap.hpp"

#include <optional>

namespace xattn::onnx {

struct attention_mask {
  std::optional<bool_mask_policy<bool>> keep;
  std::optional<causal_mask> causal;
  std::optional<lengths_mask> nonpad;

  bool visible(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    return (!keep || keep->visible(b, h, i, j)) && (!causal || causal->visible(b, h, i, j)) &&
           (!nonpad || nonpad->visible(b, h, i, j));
  }
  block classify(std::size_t b, std::size_t h, std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) const {
    block c = keep ? block::partial : block::visible;
    for (const block part : {causal ? causal->classify(b, h, i0, i1, j0, j1) : block::visible,
                             nonpad ? nonpad->classify(b, h, i0, i1, j0, j1) : block::visible}) {
      if (part == block::hidden) return block::hidden;
      if (part == block::partial) c = block::partial;
    }
    return c;
  }
  attention_mask bind(const problem& pr) const {
    attention_mask m;
    if (keep) m.keep = keep->bind(pr);
    if (causal) m.causal = causal->bind(pr);
    if (nonpad) m.nonpad = nonpad->bind(pr);
    return m;
  }
};

/// softcap c·tanh(s/c) when c > 0, identity otherwise (ONNX applies it only for c > 0).
struct optional_softcap {
  double cap = 0;
  template <class U>
  U operator()(U s, std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    return cap > 0 ? softcap_op{cap}(s, b, h, i, j) : s;
  }
  template <class T>
  void apply_row(T* s, std::size_t n, std::size_t b, std::size_t h, std::size_t i, std::size_t j0) const {
    if (cap > 0) softcap_op{cap}.apply_row(s, n, b, h, i, j0);
  }
};

/// A float attn_mask added to the scores, or nothing.
struct optional_bias {
  std::optional<tensor_bias<float>> bias;
  template <class U>
  U operator()(U s, std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    return bias ? (*bias)(s, b, h, i, j) : s;
  }
  template <class T>
  void apply_row(T* s, std::size_t n, std::size_t b, std::size_t h, std::size_t i, std::size_t j0) const {
    if (bias) bias->apply_row(s, n, b, h, i, j0);
  }
  optional_bias bind(const problem& pr) const { return bias ? optional_bias{bias->bind(pr)} : optional_bias{}; }
};

}  // namespace xattn::onnx
