#pragma once
// The backward of a policy's generic per-pair code (combine, or operator() without projections) on
// lanes of pairs: one query against up to lane_count<T> keys at once, on var_lanes<T>
// (var_lanes.hpp), one tape and one sweep for all of them. Code that branches differently across
// the lanes (divergent_lanes) is reported by returning false, having added nothing: the caller
// then differentiates those pairs one by one on var<T>.
#include "../learnable.hpp"
#include "../var_lanes.hpp"
#include "concepts.hpp"

#include <algorithm>
#include <array>
#include <span>
#include <vector>

namespace xattn {

/// Whether P's per-pair code runs on var_lanes<T>: combine when P declares features, else operator().
template <class P, class T>
constexpr bool pair_code_in_lanes() {
  using L = var_lanes<T>;
  if constexpr (declares_features<P>) return requires(const P& p, std::span<const L> f) {
      { p.combine(f, f) } -> std::convertible_to<L>;
    };
  else
    return scores_in<P, L>;
}

/// P's per-pair code as a function of (fq, fk): combine, or operator().
template <class P>
auto pair_code(const P& p) {
  return [&p](auto fq, auto fk) {
    if constexpr (declares_features<P>)
      return p.combine(fq, fk);
    else
      return p(fq, fk);
  };
}

namespace detail {
/// The tape's inputs: fq in every lane, key row keys[l] in lane l; lanes past `lanes` repeat lane
/// 0's key, so that they never branch apart from it.
template <class T>
void lane_inputs(lane_tape<T>& t, std::span<const T> fq, const T* const* keys, std::size_t nk, std::size_t lanes,
                 std::vector<var_lanes<T>>& qv, std::vector<var_lanes<T>>& kv) {
  using B = typename var_lanes<T>::batch_type;
  alignas(64) std::array<T, lane_count<T>> lane{};
  qv.resize(fq.size());
  kv.resize(nk);
  for (std::size_t n = 0; n < fq.size(); ++n) qv[n] = t.input(B(fq[n]));
  for (std::size_t n = 0; n < nk; ++n) {
    for (std::size_t l = 0; l < lane.size(); ++l) lane[l] = keys[l < lanes ? l : 0][n];
    kv[n] = t.input(B::load(lane.data()));
  }
}
}  // namespace detail

/// The per-pair backward for `lanes` pairs at once (at most lane_count<T>): one query's features fq
/// against the key features keys[l] (nk each), ds[l] the gradient at pair l's score (0: none).
/// Adds into dfq, dfk[l] and dp. Returns false, having added nothing, when the code branches
/// differently across the lanes (divergent_lanes): the caller then takes the pairs one by one.
template <class T, class Pair>
bool pair_backward_lanes(Pair&& pair, std::span<const T> fq, const T* const* keys, std::size_t nk, const T* ds,
                         std::size_t lanes, std::span<T> dfq, T* const* dfk, const parameter_slots& slots,
                         std::span<T> dp) {
  using L = var_lanes<T>;
  using B = typename L::batch_type;
  lane_tape<T>& t = lane_tape<T>::local();
  t.clear();
  thread_local std::vector<L> qv, kv;
  detail::lane_inputs(t, fq, keys, nk, lanes, qv, kv);
  L out;
  try {
    out = L(pair(std::span<const L>(qv), std::span<const L>(kv)));
  } catch (const divergent_lanes&) {
    return false;
  }
  alignas(64) std::array<T, lane_count<T>> lane{};
  for (std::size_t l = 0; l < lane.size(); ++l) lane[l] = l < lanes ? ds[l] : T(0);
  t.sweep(out, B::load(lane.data()));
  for (std::size_t n = 0; n < fq.size(); ++n) dfq[n] += hsum(t.adjoint(qv[n].id));
  for (std::size_t n = 0; n < nk; ++n) {
    t.adjoint(kv[n].id).store(lane.data());
    for (std::size_t l = 0; l < lanes; ++l) dfk[l][n] += lane[l];
  }
  if (slots.size())
    for (const auto& leaf : t.learned())
      if (const std::size_t n = slots.find(leaf.address); n != parameter_slots::npos) dp[n] += hsum(t.adjoint(leaf.id));
  return true;
}

/// The per-pair backward of one query row against keys c < cols (features key(c), gradients into
/// dkey(c)): pair_backward_lanes for each batch of lane_count<T> keys where some ds[c] is not 0,
/// and one(c) for each pair of a batch whose lanes branch apart.
template <class T, class Pair, class Key, class DKey, class One>
void pair_backward_row(Pair&& pair, std::span<const T> fq, Key&& key, DKey&& dkey, std::size_t nk, const T* ds,
                       std::size_t cols, std::span<T> dfq, const parameter_slots& slots, std::span<T> dp, One&& one) {
  constexpr std::size_t w = lane_count<T>;
  std::array<const T*, w> keys{};
  std::array<T*, w> dfk{};
  for (std::size_t c0 = 0; c0 < cols; c0 += w) {
    const std::size_t n = std::min(w, cols - c0);
    if (std::all_of(ds + c0, ds + c0 + n, [](T x) { return x == T(0); })) continue;
    for (std::size_t l = 0; l < n; ++l) keys[l] = key(c0 + l), dfk[l] = dkey(c0 + l);
    if (!pair_backward_lanes(pair, fq, keys.data(), nk, ds + c0, n, dfq, dfk.data(), slots, dp))
      for (std::size_t l = 0; l < n; ++l) one(c0 + l);
  }
}

}  // namespace xattn
