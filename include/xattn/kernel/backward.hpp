#pragma once
// The backward pass's row operations (FlashAttention-2): probabilities recomputed from the saved
// log-sum-exp, the softmax's gradient, and a scoring policy's per-row and per-key terms with their
// gradients. Its products are the forward's microkernels: S and dP by qk_tile, dQ by pv_tile, dV
// and dK by pv_tile_transposed; for tiles of plain products, P and dS come out of qk_tile's
// epilogues (probs_epilogue, softmax_grad_epilogue) instead of passes over the tile.
#include "blocking.hpp"
#include "exp.hpp"
#include "rows.hpp"
#include "trace.hpp"

#include <cstddef>
#include <type_traits>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

/// s[j] = e^(s[j] - shift - rel) over [0, n) (n a multiple of the batch size; natural scores, -inf
/// gives 0): the softmax probabilities of a row from its log-sum-exp shift + rel, by the forward's
/// exponential. Usually shift is the log-sum-exp and rel 0; for rows whose log-sum-exp is too large
/// to resolve a probability (a row of d2l's -1e6 fills), shift is the row max and rel the log of
/// the sum relative to it, so s - shift is exact. Returns the probabilities' sum (1 when these are
/// the row's own statistics).
template <class T>
T probs_row(T* s, std::size_t n, T shift, T rel) {
  trace::note({operation::probs_row});
  constexpr std::size_t w = simd::width<T>;
  const batch<T> sh(shift);
  for (std::size_t j = 0; j < n; j += w) simd::store(s + j, simd::load(s + j) - sh);
  to_base2_row(s, n);
  return exp_row(s, n, rel * static_cast<T>(log2e));
}

/// qk_tile's epilogue for the scores of a tile every score of which is a plain product (nothing
/// hidden, no modifier): stores the probabilities p = 2^(sum · c - t_r), c = scale · log2 e and
/// t_r = lse_r · log2 e, and adds each row's to sums[r] (a batch of partial sums per row); every
/// column must be a key (no padding: it would get probability 2^-t_r). One FMA and the
/// exponential on registers replace probs_row's passes over the tile (scale, subtract, base 2,
/// exponential): the same probabilities to a few roundings (c and t_r are rounded once each).
template <class Acc>
struct probs_epilogue {
  static constexpr tile_op op{operation::probs_epilogue};
  const Acc* t;      // per tile row: its log-sum-exp times log2 e
  Acc c;             // the score scale times log2 e
  batch<Acc>* sums;  // per tile row: partial sums of its probabilities
  struct bound {
    const probs_epilogue* e;
    std::size_t r0;
    template <std::size_t C>
    [[gnu::always_inline]] void operator()(std::size_t i, const batch<Acc> (&acc)[C], Acc* dst) const {
      const batch<Acc> t(e->t[r0 + i]), c(e->c);
      batch<Acc> sum = e->sums[r0 + i];
      // forced inline: with the exponential inside, GCC may leave the per-batch step out of line
      // in a large caller, spilling the microkernel's accumulators
      detail::each(
          detail::upto<C>, [&](std::size_t k) __attribute__((always_inline)) {
            const batch<Acc> p = exp2_nonpositive(xsimd::fms(acc[k], c, t));
            simd::store(dst + k * simd::width<Acc>, p);
            sum += p;
          });
      e->sums[r0 + i] = sum;
    }
  };
  bound at(std::size_t r, std::size_t) const noexcept { return {this, r}; }
};

/// qk_tile's epilogue for dP = dO·Vᵀ of such a tile: stores dS = c · p · (dP - delta_r) (what
/// softmax_grad_row computes), p read at the same place in the probabilities' tile, p_offset
/// elements from dP's.
template <class Acc>
struct softmax_grad_epilogue {
  static constexpr tile_op op{operation::softmax_grad_epilogue};
  const Acc* delta;  // per tile row: rowsum(dO ∘ O)
  Acc c;             // the score scale
  std::ptrdiff_t p_offset;
  struct bound {
    const softmax_grad_epilogue* e;
    std::size_t r0;
    template <std::size_t C>
    [[gnu::always_inline]] void operator()(std::size_t i, const batch<Acc> (&acc)[C], Acc* dst) const {
      const batch<Acc> d(e->delta[r0 + i]), c(e->c);
      detail::each(
          detail::upto<C>, [&](std::size_t k) __attribute__((always_inline)) {
            Acc* at = dst + k * simd::width<Acc>;
            simd::store(at, c * simd::load(at + e->p_offset) * (acc[k] - d));
          });
    }
  };
  bound at(std::size_t r, std::size_t) const noexcept { return {this, r}; }
};

/// dp[j] = c · p[j] · (dp[j] - delta) over [0, n) (n a multiple of the batch size): the gradient
/// of the scores from that of the probabilities, delta = Σ_j p[j]·dp[j] = rowsum(dO ∘ O), times
/// the score scale c (the chain rule through S = c·Q·Kᵀ, folded in here).
template <class T>
void softmax_grad_row(const T* p, T* dp, std::size_t n, T delta, T c) {
  trace::note({operation::softmax_grad_row});
  constexpr std::size_t w = simd::width<T>;
  const batch<T> dv(delta), cv(c);
  for (std::size_t j = 0; j < n; j += w) simd::store(dp + j, cv * simd::load(p + j) * (simd::load(dp + j) - dv));
}

/// s[j] += a + b[j] over [0, n) (n a multiple of the batch size, b as wide): a score row's
/// per-query term a and per-key terms b.
template <class T>
void add_terms_row(T* s, std::size_t n, T a, const T* b) {
  constexpr std::size_t w = simd::width<T>;
  const batch<T> av(a);
  for (std::size_t j = 0; j < n; j += w) simd::store(s + j, simd::load(s + j) + (av + simd::load(b + j)));
}

/// col[j] += g[j] over [0, n) (n a multiple of the batch size, col as wide); returns Σ_j g[j]:
/// one row of dS into the gradients at the key terms and at the row's query term.
template <class T>
T accumulate_row(const T* g, std::size_t n, T* col) {
  constexpr std::size_t w = simd::width<T>;
  batch<T> sum(T(0));
  for (std::size_t j = 0; j < n; j += w) {
    const batch<T> x = simd::load(g + j);
    simd::store(col + j, simd::load(col + j) + x);
    sum += x;
  }
  return simd::hsum(sum);
}

/// Σ_d a[d]·b[d] over [0, n) for rows of any element types, in T; contiguous rows of T (or of
/// 16-bit floats widened in registers) a batch at a time, since the backward takes one per query
/// row (Δ = rowsum(dO ∘ O)).
template <class T, class A, class B>
T dot_row(const A* a, std::ptrdiff_t sa, const B* b, std::ptrdiff_t sb, std::size_t n) {
  T s = 0;
  std::size_t d = 0;
  if constexpr ((std::is_same_v<A, T> || simd::widens16_v<T, A>)&&(std::is_same_v<B, T> || simd::widens16_v<T, B>)) {
    constexpr std::size_t w = simd::width<T>;
    if (sa == 1 && sb == 1 && n >= w) {
      batch<T> acc(T(0));
      for (; d + w <= n; d += w) acc = xsimd::fma(simd::load_as<T>(a + d), simd::load_as<T>(b + d), acc);
      s = simd::hsum(acc);
    }
  }
  for (; d < n; ++d) s += T(a[std::ptrdiff_t(d) * sa]) * T(b[std::ptrdiff_t(d) * sb]);
  return s;
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
