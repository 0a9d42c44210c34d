#pragma once
// Keys projected once per evaluation, never per (query, key) pair: the n features of every
// (batch, kv head, key) and each key's additive term, in the policy's scalar type S.
#include "../kernel/aligned.hpp"
#include "../kernel/rows.hpp"
#include "../layout.hpp"
#include "../policy/problem.hpp"

#include <span>
#include <vector>

namespace xattn {

template <class S>
struct key_features {
  layout<4> at;       // (B, Hkv, Skv, n) over f
  layout<3> term_at;  // (B, Hkv, Skv) over beta
  kernel::aligned_vector<S> f;
  std::vector<S> beta;

  key_features() = default;
  key_features(const problem& pr, std::size_t n)
      : at(layout<4>::row_major({pr.batch, pr.kv_heads, pr.kv_len, n})),
        term_at(layout<3>::row_major({pr.batch, pr.kv_heads, pr.kv_len})),
        f(at.size()),
        beta(term_at.size(), S(0)) {}

  std::size_t width() const noexcept { return at.shape[3]; }
  S* row(std::size_t b, std::size_t h, std::size_t j) noexcept { return f.data() + at(b, h, j, 0); }
  const S* row(std::size_t b, std::size_t h, std::size_t j) const noexcept { return f.data() + at(b, h, j, 0); }
  S& term(std::size_t b, std::size_t h, std::size_t j) noexcept { return beta[term_at(b, h, j)]; }
  S term(std::size_t b, std::size_t h, std::size_t j) const noexcept { return beta[term_at(b, h, j)]; }

  /// f(b, h, j, row, term) for every key: an orphaned `omp for` (see pack_key_panels).
  template <class F>
  void for_each_key(F&& f_of) {
    const auto count = std::ptrdiff_t(term_at.size());
    const auto& sh = term_at.shape;
#pragma omp for schedule(static)
    for (std::ptrdiff_t r = 0; r < count; ++r) {
      const std::size_t j = std::size_t(r) % sh[2], bh = std::size_t(r) / sh[2];
      const std::size_t b = bh / sh[1], h = bh % sh[1];
      f_of(b, h, j, row(b, h, j), term(b, h, j));
    }
  }
};

/// Projects a raw row through f(span<const S> x, span<S> out) -> term, converting the row from its
/// storage (stride apart) to S first; scratch is the caller's per-thread buffer.
template <class S, class E, class F>
S project_row(const E* src, std::ptrdiff_t stride, std::size_t d, std::vector<S>& scratch, S* out, std::size_t n,
              F&& f) {
  scratch.resize(d);
  kernel::scaled_copy(src, stride, d, S(1), scratch.data(), 1);
  return S(f(std::span<const S>(scratch), std::span<S>(out, n)));
}

/// Every key of kv (rows of k_dim elements) projected by the policy into f: features and term.
/// An orphaned `omp for`, like for_each_key.
template <class S, class KView, class Policy>
void project_keys(key_features<S>& f, const KView& kv, std::size_t k_dim, const Policy& policy) {
  std::vector<S> raw;
  f.for_each_key([&](std::size_t b, std::size_t h, std::size_t j, S* row, S& term) {
    term = project_row(kv.row(b, h, j), kv.inner_stride(), k_dim, raw, row, f.width(),
                       [&](std::span<const S> x, std::span<S> out) { return policy.project_key(x, out); });
  });
}

}  // namespace xattn
