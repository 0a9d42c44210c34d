#pragma once
// Top-k sparse attention from a kv_cache, written as a user would (DeepSeek's sparse attention: a
// cheap indexer picks each query's keys, attention reads only those). The toy indexer scores every
// cached token by a low-dimensional dot product -- the first `index_dims` features of the query
// heads of a group, averaged, against the same features of the keys -- and keeps the k best per
// query among the tokens it may see (causal: up to its own position), padding with -1 when fewer
// are visible. select(K, idx) and select(V, idx) then attend exactly those, read in place from
// the pages. tests/dsl/test_sparse_attention.cpp checks the indexer's choice and the output
// against attention over the chosen tokens recomputed from plain tensors; `make demo` prints how
// close sparse attention comes to dense attention as k grows.
#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace dsl::sparse {

/// The indexer: idx (B, Hkv, Sq, k) of the k tokens of each sequence with the highest index score
/// for each query, in increasing position order, -1 past the visible ones. keys[b] are sequence
/// b's stored keys (Hkv, length, D); query i of sequence b sits at position length - Sq + i.
inline xt::xtensor<std::int32_t, 4> top_k(const xt::xtensor<float, 4>& q,
                                          const std::vector<xt::xtensor<float, 3>>& keys, std::size_t k,
                                          std::size_t index_dims) {
  const std::size_t B = q.shape()[0], Hq = q.shape()[1], Sq = q.shape()[2], Hkv = keys[0].shape()[0];
  xt::xtensor<std::int32_t, 4> idx = xt::xtensor<std::int32_t, 4>::from_shape({B, Hkv, Sq, k});
  std::vector<float> score;
  std::vector<std::int32_t> order;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < Hkv; ++h)
      for (std::size_t i = 0; i < Sq; ++i) {
        // [snippet indexer]
        const std::size_t len = keys[b].shape()[1], visible = len - Sq + i + 1, group = Hq / Hkv;
        std::vector<float> qi(index_dims, 0.0f);  // the group's queries, averaged, on the index features
        for (std::size_t g = 0; g < group; ++g)
          for (std::size_t d = 0; d < index_dims; ++d) qi[d] += q(b, h * group + g, i, d) / float(group);
        score.assign(visible, 0.0f);
        for (std::size_t j = 0; j < visible; ++j)
          for (std::size_t d = 0; d < index_dims; ++d) score[j] += qi[d] * keys[b](h, j, d);
        order.resize(visible);
        std::iota(order.begin(), order.end(), 0);
        const std::size_t kept = std::min(k, visible);
        std::partial_sort(
            order.begin(), order.begin() + std::ptrdiff_t(kept), order.end(),
            [&](std::int32_t x, std::int32_t y) { return score[std::size_t(x)] > score[std::size_t(y)]; });
        std::sort(order.begin(), order.begin() + std::ptrdiff_t(kept));  // in position order: pages read forwards
        for (std::size_t t = 0; t < k; ++t) idx(b, h, i, t) = t < kept ? order[t] : -1;
        // [end indexer]
      }
  return idx;
}

/// Sparse attention of queries q (B, Hq, Sq, D), the newest Sq tokens of each sequence of `batch`,
/// over the k tokens the indexer picks for each, and the indices it picked.
template <class T>
std::pair<xt::xtensor<float, 4>, xt::xtensor<std::int32_t, 4>> attend_top_k(
    const xattn::kv_cache<T>& cache, const std::vector<xattn::sequence_id>& batch, const xt::xtensor<float, 4>& q,
    std::size_t k, std::size_t index_dims) {
  using namespace xattn;
  std::vector<xt::xtensor<float, 3>> keys;  // a real indexer keeps its own small cache of index keys
  for (const sequence_id s : batch) keys.push_back(cache.stored_keys(s));
  const float scale = 1.0f / std::sqrt(float(q.shape()[3]));
  // [snippet select]
  const xt::xtensor<std::int32_t, 4> idx = top_k(q, keys, k, index_dims);  // (B, Hkv, Sq, k)
  const auto K = cache.keys(batch), V = cache.values(batch);
  xt::xtensor<float, 4> out = eval(softmax(ref(q) * trans(select(K, idx)) * scale) * select(V, idx));
  // [end select]
  return {std::move(out), idx};
}

/// Dense attention of the same queries over every token each may see (the reference the demo
/// compares with).
template <class T>
xt::xtensor<float, 4> attend_all(const xattn::kv_cache<T>& cache, const std::vector<xattn::sequence_id>& batch,
                                 const xt::xtensor<float, 4>& q) {
  using namespace xattn;
  const float scale = 1.0f / std::sqrt(float(q.shape()[3]));
  return eval(softmax(mask(ref(q) * trans(cache.keys(batch)) * scale, causal(align::bottom_right))) *
              cache.values(batch));
}

/// |a - b| / |b| over all elements.
inline double relative_error(const xt::xtensor<float, 4>& a, const xt::xtensor<float, 4>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += std::pow(double(a.data()[i]) - double(b.data()[i]), 2);
    den += std::pow(double(b.data()[i]), 2);
  }
  return std::sqrt(num / den);
}

}  // namespace dsl::sparse
