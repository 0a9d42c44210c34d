#pragma once
// documents(ids): packed variable-length sequences -- xformers' BlockDiagonal, FlashAttention's
// varlen, FlexAttention's document mask. ids holds each token's document id (any integer type),
// shape (B, S) or (S) for every batch; query i sees key j iff their ids are equal. With Sq != Skv,
// documents(q_ids, kv_ids). documents_from_offsets(cu_seqlens [, cu_seqlens_kv]) builds the ids
// from offsets: document d holds positions [cu[d], cu[d+1]). Masked keys are excluded; compose
// with causal() for causal documents. Ids in runs (sorted per batch, as packing makes them) let
// classify() skip every block between two documents and hide_row() fill ranges; other ids are
// compared element by element.
#include "../../error.hpp"
#include "../problem.hpp"
#include "fill.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace xattn {

struct documents_mask {
  struct ids_t {
    std::vector<std::int64_t> v;
    std::vector<std::size_t> shape;  // (S) or (B, S)
    const char* name = "ids";
    std::int64_t at(std::size_t b, std::size_t i) const noexcept { return v[shape.size() == 1 ? i : b * shape[1] + i]; }
  };
  ids_t q, kv;

  // set by bind: whether every batch's ids are sorted, and then each query's visible keys [lo, hi)
  bool runs = false;
  std::size_t q_len = 0, kv_len = 0;
  std::vector<std::int64_t> lo, hi;  // (B, Sq)

  bool visible(std::size_t b, std::size_t, std::size_t i, std::size_t j) const noexcept {
    return q.at(b, i) == kv.at(b, j);
  }

  block classify(std::size_t b, std::size_t, std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) const {
    if (!runs) return block::partial;
    bool all = true, none = true;  // every row sees the whole block; no row sees any of it
    for (std::size_t n = b * q_len + i0; n < b * q_len + i1; ++n) {
      all = all && lo[n] <= std::int64_t(j0) && hi[n] >= std::int64_t(j1);
      none = none && std::max(lo[n], std::int64_t(j0)) >= std::min(hi[n], std::int64_t(j1));
    }
    return all ? block::visible : none ? block::hidden : block::partial;
  }

  /// A bound on row i's visible keys: its document's run when the ids are in runs, else every key.
  std::pair<std::int64_t, std::int64_t> row_span(std::size_t b, std::size_t, std::size_t i) const noexcept {
    if (runs) return {lo[b * q_len + i], hi[b * q_len + i]};
    return {0, std::int64_t(kv_len)};
  }

  template <class T>
  void hide_row(T* s, std::size_t n, std::size_t b, std::size_t, std::size_t i, std::size_t j0, T value) const {
    if (runs) return fill_outside(s, n, j0, {lo[b * q_len + i], hi[b * q_len + i]}, value);
    const std::int64_t id = q.at(b, i);
    for (std::size_t c = 0; c < n; ++c)
      if (kv.at(b, j0 + c) != id) s[c] = value;
  }

  documents_mask bind(const problem& pr) const {
    auto check = [&](const ids_t& x, std::size_t len, const char* axis) {
      const bool ok = (x.shape.size() == 1 && x.shape[0] == len) ||
                      (x.shape.size() == 2 && x.shape[0] == pr.batch && x.shape[1] == len);
      if (!ok)
        fail("documents(", x.name, "): ", x.name, " has shape ", shape_str(x.shape), " but must be (", len, ") or (",
             pr.batch, ",", len, ") for ", axis, " of the scores ", shape_str(pr.score_shape()));
    };
    check(q, pr.q_len, "the queries");
    check(kv, pr.kv_len, "the keys");
    documents_mask m = *this;
    m.q_len = pr.q_len;
    m.kv_len = pr.kv_len;
    m.runs = true;
    for (std::size_t b = 0; b < pr.batch && m.runs; ++b)
      for (std::size_t i = 1; i < std::max(pr.q_len, pr.kv_len) && m.runs; ++i)
        m.runs = (i >= pr.q_len || q.at(b, i - 1) <= q.at(b, i)) && (i >= pr.kv_len || kv.at(b, i - 1) <= kv.at(b, i));
    if (m.runs) {
      m.lo.resize(pr.batch * pr.q_len);
      m.hi.resize(pr.batch * pr.q_len);
      std::vector<std::int64_t> row(pr.kv_len);
      for (std::size_t b = 0; b < pr.batch; ++b) {
        for (std::size_t j = 0; j < pr.kv_len; ++j) row[j] = kv.at(b, j);
        for (std::size_t i = 0; i < pr.q_len; ++i) {
          const auto [f, l] = std::equal_range(row.begin(), row.end(), q.at(b, i));
          m.lo[b * pr.q_len + i] = f - row.begin();
          m.hi[b * pr.q_len + i] = l - row.begin();
        }
      }
    }
    return m;
  }
};

namespace detail {

template <class E>
documents_mask::ids_t document_ids(const E& ids, const char* name) {
  static_assert(std::is_integral_v<typename E::value_type>, "xattn: documents(ids) needs an integer tensor");
  documents_mask::ids_t r;
  r.name = name;
  r.shape.assign(ids.shape().begin(), ids.shape().end());
  if (r.shape.empty() || r.shape.size() > 2)
    fail("documents(", name, "): ", name, " must have rank 1 (seq) or 2 (batch, seq), got shape ", shape_str(r.shape));
  for (auto x : ids) r.v.push_back(std::int64_t(x));
  return r;
}

template <class E>
documents_mask::ids_t ids_from_offsets(const E& cu, const char* name) {
  static_assert(std::is_integral_v<typename E::value_type>, "xattn: documents_from_offsets(cu_seqlens) needs integers");
  std::vector<std::int64_t> off(cu.begin(), cu.end());
  if (off.size() < 2 || off.front() != 0 || !std::is_sorted(off.begin(), off.end()))
    fail("documents_from_offsets(", name, "): ", name,
         " must start at 0 and never decrease, with at least one document; got ", off.size(), " offsets");
  documents_mask::ids_t r;
  r.name = name;
  r.shape = {std::size_t(off.back())};
  for (std::size_t d = 0; d + 1 < off.size(); ++d)
    r.v.insert(r.v.end(), std::size_t(off[d + 1] - off[d]), std::int64_t(d));
  return r;
}

}  // namespace detail

/// Self-attention over packed documents: ids (S) or (B, S), one document id per token.
template <class E>
documents_mask documents(const E& ids) {
  documents_mask m;
  m.q = m.kv = detail::document_ids(ids, "ids");
  return m;
}

/// Queries and keys with their own ids (e.g. Sq != Skv): q_ids (Sq) or (B, Sq), kv_ids (Skv) or (B, Skv).
template <class Eq, class Ek>
documents_mask documents(const Eq& q_ids, const Ek& kv_ids) {
  documents_mask m;
  m.q = detail::document_ids(q_ids, "q_ids");
  m.kv = detail::document_ids(kv_ids, "kv_ids");
  return m;
}

/// From offsets (FlashAttention's cu_seqlens): document d holds positions [cu[d], cu[d+1]),
/// cu[0] = 0 and cu.back() = S; the same for every batch.
template <class E>
documents_mask documents_from_offsets(const E& cu_seqlens) {
  documents_mask m;
  m.q = m.kv = detail::ids_from_offsets(cu_seqlens, "cu_seqlens");
  return m;
}

/// Document d's queries [cu_q[d], cu_q[d+1]) attend its keys [cu_kv[d], cu_kv[d+1]).
template <class Eq, class Ek>
documents_mask documents_from_offsets(const Eq& cu_seqlens_q, const Ek& cu_seqlens_kv) {
  documents_mask m;
  m.q = detail::ids_from_offsets(cu_seqlens_q, "cu_seqlens_q");
  m.kv = detail::ids_from_offsets(cu_seqlens_kv, "cu_seqlens_kv");
  if (std::size_t(cu_seqlens_q.size()) != std::size_t(cu_seqlens_kv.size()))
    fail("documents_from_offsets(cu_seqlens_q, cu_seqlens_kv): ", cu_seqlens_q.size(), " and ", cu_seqlens_kv.size(),
         " offsets: both must list the same documents");
  return m;
}

}  // namespace xattn
