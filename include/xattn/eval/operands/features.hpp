#pragma once
// Rows projected once per evaluation, never per (query, key) pair: the n features of every
// (batch, head, position) and each row's additive term, in the policy's scalar type S. The forward
// keeps its keys so; the backward its queries and keys, and the gradients at them.
#include "../../kernel/aligned.hpp"
#include "../../kernel/rows.hpp"
#include "../../kernel/trace.hpp"
#include "../../layout.hpp"

#include <span>
#include <vector>

namespace xattn {

template <class S>
struct row_features {
  layout<4> at;       // (B, H, S, n) over f
  layout<3> term_at;  // (B, H, S) over term
  kernel::aligned_vector<S> f;
  std::vector<S> term;

  row_features() = default;
  row_features(std::size_t batch, std::size_t heads, std::size_t len, std::size_t n)
      : at(layout<4>::row_major({batch, heads, len, n})),
        term_at(layout<3>::row_major({batch, heads, len})),
        f(at.size()),
        term(term_at.size(), S(0)) {}

  std::size_t width() const noexcept { return at.shape[3]; }
  S* row(std::size_t b, std::size_t h, std::size_t j) noexcept { return f.data() + at(b, h, j, 0); }
  const S* row(std::size_t b, std::size_t h, std::size_t j) const noexcept { return f.data() + at(b, h, j, 0); }
  S& term_of(std::size_t b, std::size_t h, std::size_t j) noexcept { return term[term_at(b, h, j)]; }
  const S& term_of(std::size_t b, std::size_t h, std::size_t j) const noexcept { return term[term_at(b, h, j)]; }
  strided_view<S> view() noexcept { return {f.data(), at}; }
  strided_view<const S> view() const noexcept { return {f.data(), at}; }

  /// f(b, h, j, row, term) for every row: an orphaned `omp for` (see pack_key_panels), so the
  /// threads of the pass's parallel region share the work.
  template <class F>
  void for_each_row(F&& f_of) {
    const auto count = std::ptrdiff_t(term_at.size());
    const auto& sh = term_at.shape;
#pragma omp for schedule(static)
    for (std::ptrdiff_t r = 0; r < count; ++r) {
      const std::size_t j = std::size_t(r) % sh[2], bh = std::size_t(r) / sh[2];
      const std::size_t b = bh / sh[1], h = bh % sh[1];
      f_of(b, h, j, row(b, h, j), term_of(b, h, j));
    }
  }
};

/// Projects a raw row through f(span<const S> x, span<S> out) -> term, converting the row from its
/// storage (stride apart) to S first; scratch is the caller's per-thread buffer.
template <class S, class E, class F>
S project_row(const E& src, std::ptrdiff_t stride, std::size_t d, std::vector<S>& scratch, S* out, std::size_t n,
              F&& f) {
  scratch.resize(d);
  kernel::scaled_copy(src, stride, d, S(1), scratch.data(), 1);
  return S(f(std::span<const S>(scratch), std::span<S>(out, n)));
}

/// Every row of view x (d elements each) projected by project(x, out) -> term into f: features and
/// term. An orphaned `omp for`, like for_each_row.
template <class S, class View, class Project>
void project_rows(row_features<S>& f, const View& x, std::size_t d, Project&& project) {
  kernel::trace::note(kernel::tile_op{kernel::operation::project_rows});
  std::vector<S> raw;
  f.for_each_row([&](std::size_t b, std::size_t h, std::size_t j, S* row, S& term) {
    term = project_row(x.row(b, h, j), x.inner_stride(), d, raw, row, f.width(), project);
  });
}

/// The keys of view k projected by policy's project_key (forward and backward alike).
template <class S, class View, class Policy>
void project_keys(row_features<S>& f, const View& k, std::size_t d, const Policy& policy) {
  project_rows(f, k, d, [&](std::span<const S> x, std::span<S> out) { return policy.project_key(x, out); });
}

/// The queries of view q projected by policy's project_query (the backward: once, not per task).
template <class S, class View, class Policy>
void project_queries(row_features<S>& f, const View& q, std::size_t d, const Policy& policy) {
  project_rows(f, q, d, [&](std::span<const S> x, std::span<S> out) { return policy.project_query(x, out); });
}

/// Rows of view x copied as they are into f (converted to S): the raw rows of a policy that has
/// no projections.
template <class S, class View>
void copy_rows(row_features<S>& f, const View& x) {
  f.for_each_row([&](std::size_t b, std::size_t h, std::size_t j, S* row, S&) {
    kernel::scaled_copy(x.row(b, h, j), x.inner_stride(), f.width(), S(1), row, 1);
  });
}

}  // namespace xattn
