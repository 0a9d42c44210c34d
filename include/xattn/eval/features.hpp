#pragma once
// Projections run once per row, never per (query, key) pair: key features for every (b, kv head,
// key) before the fused pass, query features per task.
#include "../expr/tensor_ref.hpp"
#include "../policy/problem.hpp"
#include "score_paths.hpp"

#include <algorithm>
#include <span>
#include <vector>

namespace xattn {

/// n-wide features of every key of every (batch, kv head), plus each key's additive term.
template <class T>
struct key_features {
  std::size_t n = 0, kv_len = 0, kv_heads = 0;
  std::vector<T> f, beta;

  const T* row(std::size_t b, std::size_t h, std::size_t j) const noexcept {
    return f.data() + ((b * kv_heads + h) * kv_len + j) * n;
  }
  T term(std::size_t b, std::size_t h, std::size_t j) const noexcept { return beta[(b * kv_heads + h) * kv_len + j]; }
};

/// Copy a (possibly strided) row into contiguous storage.
template <class T>
void gather_row(const T* src, std::ptrdiff_t stride, std::size_t n, T* dst) {
  if (stride == 1)
    std::copy_n(src, n, dst);
  else
    for (std::size_t d = 0; d < n; ++d) dst[d] = src[std::ptrdiff_t(d) * stride];
}

/// Feature width of a policy base.
template <score_path Path, class Base>
std::size_t feature_width(const Base& base, const problem& pr) {
  if constexpr (Path == score_path::dot_features || Path == score_path::pair_features)
    return base.policy.feature_size(pr.q_dim, pr.k_dim);
  else if constexpr (Path == score_path::pair_raw)
    return pr.k_dim;  // raw keys; queries keep their own width
  else
    return pr.q_dim;
}

template <score_path Path, class T, class Base>
key_features<T> project_keys(const Base& base, const problem& pr, std::size_t n, int threads) {
  key_features<T> kf;
  if constexpr (Path == score_path::dot_features || Path == score_path::pair_features || Path == score_path::pair_raw) {
    kf.n = n;
    kf.kv_len = pr.kv_len;
    kf.kv_heads = pr.kv_heads;
    const std::size_t rows = pr.batch * pr.kv_heads * pr.kv_len;
    kf.f.resize(rows * n);
    kf.beta.assign(rows, T(0));
    const auto& kv = base.k.view;
    const std::ptrdiff_t count = std::ptrdiff_t(rows);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (std::ptrdiff_t r = 0; r < count; ++r) {
      const std::size_t j = std::size_t(r) % pr.kv_len, bh = std::size_t(r) / pr.kv_len;
      const std::size_t b = bh / pr.kv_heads, h = bh % pr.kv_heads;
      T* out = kf.f.data() + std::size_t(r) * n;
      if constexpr (Path == score_path::pair_raw) {
        gather_row(kv.row(b, h, j), kv.strides[3], pr.k_dim, out);
      } else {
        std::vector<T> raw(pr.k_dim);
        gather_row(kv.row(b, h, j), kv.strides[3], pr.k_dim, raw.data());
        kf.beta[std::size_t(r)] = base.policy.project_key(std::span<const T>(raw), std::span<T>(out, n));
      }
    }
  }
  return kf;
}

}  // namespace xattn
