#pragma once
// The rarer runtime choices of the C interface (documents, a boolean or additive mask, a bias
// tensor, ALiBi, dropout) in one expression per accumulator type instead of one per combination:
// each mask has its place in the mask list, given or not at run time (policy/masks/maybe.hpp),
// and every additive term is one modifier. Whether there is any term, the bias (whose gradient
// the backward returns) and dropout stay compile-time choices.
#include "args.hpp"
#include "expression.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace xattn::c_api {

/// The masks of one call, each given or not: four places in the plan's mask list, composed by the
/// kernel as any masks are (a block is skipped when one hides it, runs unmasked when all show it).
struct call_masks {
  maybe_mask<window_mask> band;
  maybe_mask<lengths_mask> lengths;
  maybe_mask<documents_mask> documents;
  maybe_mask<bool_mask_policy<std::uint8_t>> flags;

  template <class S>
  auto on(const S& scores) const {
    return mask(mask(mask(mask(scores, band), lengths), documents), flags);
  }
};

/// The additive terms of one call as one score modifier: softcap, then the additive mask and ALiBi.
template <class Acc>
struct runtime_scores {
  double cap = 0;  // 0: off
  std::optional<tensor_bias<Acc>> added;
  std::optional<alibi_op> alibi;

  template <class U>
  U operator()(U s, std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    if (cap > 0) s = softcap_op{cap}(s, b, h, i, j);
    if (added) s = (*added)(s, b, h, i, j);
    if (alibi) s = (*alibi)(s, b, h, i, j);
    return s;
  }

  template <class T>
  void apply_row(T* s, std::size_t n, std::size_t b, std::size_t h, std::size_t i, std::size_t j0) const {
    if (cap > 0) softcap_op{cap}.apply_row(s, n, b, h, i, j0);
    if (added) added->apply_row(s, n, b, h, i, j0);
    if (alibi)
      for (std::size_t c = 0; c < n; ++c) s[c] = (*alibi)(s[c], b, h, i, j0 + c);
  }

  runtime_scores bind(const problem& pr) const {
    runtime_scores r = *this;
    if (cap > 0) softcap_op{cap}.bind(pr);
    if (added) r.added = added->bind(pr);
    if (alibi) r.alibi = alibi->bind(pr);
    return r;
  }
};

/// The caller's tensor as Acc: its own memory when it holds Acc, else a dense copy.
template <class Acc>
nd_ref<Acc> acc_ref(const view_nd& t) {
  nd_ref<Acc> r;
  r.shape = t.shape;
  if ((t.dtype == XATTN_F64) == std::is_same_v<Acc, double>) {
    r.data = static_cast<const Acc*>(t.data);
    r.strides = t.strides;
    return r;
  }
  std::array<std::size_t, 4> n{1, 1, 1, 1};
  std::array<std::ptrdiff_t, 4> st{};
  const std::size_t pad = 4 - t.shape.size();
  for (std::size_t a = 0; a < t.shape.size(); ++a) n[pad + a] = t.shape[a], st[pad + a] = t.strides[a];
  auto copy = std::make_shared<std::vector<Acc>>();
  copy->reserve(n[0] * n[1] * n[2] * n[3]);
  for (std::size_t a = 0; a < n[0]; ++a)
    for (std::size_t b = 0; b < n[1]; ++b)
      for (std::size_t c = 0; c < n[2]; ++c)
        for (std::size_t d = 0; d < n[3]; ++d) {
          const std::ptrdiff_t at = std::ptrdiff_t(a) * st[0] + std::ptrdiff_t(b) * st[1] + std::ptrdiff_t(c) * st[2] +
                                    std::ptrdiff_t(d) * st[3];
          copy->push_back(t.dtype == XATTN_F64 ? Acc(static_cast<const double*>(t.data)[at])
                                               : Acc(static_cast<const float*>(t.data)[at]));
        }
  r.data = copy->data();
  r.strides.assign(t.shape.size(), 0);
  std::ptrdiff_t s = 1;
  for (std::size_t a = t.shape.size(); a-- > 0;) r.strides[a] = s, s *= std::ptrdiff_t(t.shape[a]);
  r.owned = copy;
  return r;
}

/// What a call's runtime choices make: one sink logit per head (-inf: none), the additive terms
/// and the masks.
template <class Acc>
struct general_parts {
  xt::xtensor<double, 1> sink_values;
  runtime_scores<Acc> terms;
  call_masks masks;

  explicit general_parts(const forward_args& a) {
    const std::size_t heads = a.q.shape[1];
    sink_values = xt::zeros<double>({heads});
    for (std::size_t h = 0; h < heads; ++h)
      sink_values(h) = a.sinks.empty() ? -std::numeric_limits<double>::infinity() : a.sinks[h];
    terms.cap = a.softcap;
    if (a.additive_mask.given) terms.added = tensor_bias<Acc>{acc_ref<Acc>(a.additive_mask)};
    if (!a.alibi.empty()) {
      terms.alibi.emplace();
      terms.alibi->slopes = a.alibi;
    }
    if (a.band) masks.band.m = window(a.left, a.right, a.where);
    masks.lengths.m = a.lengths;
    masks.documents.m = a.documents;
    if (a.flags.given)
      masks.flags.m = bool_mask_policy<std::uint8_t>{
          nd_ref<std::uint8_t>{static_cast<const std::uint8_t*>(a.flags.data), a.flags.shape, a.flags.strides, {}}};
  }

  /// Whether the call has an additive term (softcap, a float mask, ALiBi).
  bool has_terms() const noexcept { return terms.cap > 0 || terms.added || terms.alibi; }

  /// softmax(mask([modify(]scores[, terms)] [+ bias], masks), sinks): the weights. Without terms
  /// the modifier is left out: the backward takes modifiers through element by element.
  template <class S, class Terms, class Bias>
  auto weights(const S& scores, Terms, Bias, const forward_args& a) const {
    const auto modified = [&] {
      if constexpr (Terms::value)
        return modify(scores, terms);
      else
        return scores;
    }();
    if constexpr (Bias::value)
      return softmax(masks.on(modified + tensor_bias<Acc>{acc_ref<Acc>(a.bias)}), sinks(sink_values));
    else
      return softmax(masks.on(modified), sinks(sink_values));
  }
};

/// f(the expression of every runtime choice) for scores of element type Acc and the values V:
/// the weights general_parts makes, [dropout,] times V. Terms are a compile-time choice when
/// OptionalTerms (the dot product), else always present (the additive scorer: fewer variants).
template <class Acc, bool OptionalTerms, class S, class V, class F>
void with_general_attention(const forward_args& a, const S& scores, const V& v, F&& f) {
  const general_parts<Acc> parts(a);
  const auto with_terms = [&](auto terms) {
    with_flag(a.bias.given, [&](auto with_bias) {
      const auto w = parts.weights(scores, terms, with_bias, a);
      with_flag(a.dropout_p > 0, [&](auto drop) {
        if constexpr (decltype(drop)::value)
          f(dropout(w, a.dropout_p, a.seed) * v);
        else
          f(w * v);
      });
    });
  };
  if constexpr (OptionalTerms)
    with_flag(parts.has_terms(), with_terms);
  else
    with_terms(std::true_type{});
}

/// with_general_attention on the call's scores: the additive scorer's, or the scaled dot product.
template <class Q, class K, class V, class F>
void with_rarer_attention(const forward_args& a, const Q& q, const K& k, const V& v, F&& f) {
  using Acc = std::remove_cv_t<typename Q::value_type>;
  if (a.scorer)
    with_general_attention<Acc, false>(a, score(*a.scorer, q, k) * a.scale, v, std::forward<F>(f));
  else
    with_general_attention<Acc, true>(a, q * trans(k) * a.scale, v, std::forward<F>(f));
}

/// with_attention, or with_rarer_attention when the call asks for a rarer part.
template <class Q, class K, class V, class F>
void with_any_attention(const forward_args& a, const Q& q, const K& k, const V& v, F&& f) {
  if (a.general())
    with_rarer_attention(a, q, k, v, std::forward<F>(f));
  else
    with_attention(a, q, k, v, std::forward<F>(f));
}

}  // namespace xattn::c_api
