#pragma once
// The score product S = Q · Kᵀ of one tile: against packed key panels (qk_tile, its microkernel
// qk_micro), or reading key rows where they lie (qk_direct, for decoding). Queries come in the
// accumulator type Acc; keys in any storage type, converted as they are loaded.
#include "blocking.hpp"

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace xattn::kernel {

namespace detail {

// qk_micro and pv_micro write out the same rank-1-update loop on purpose: sharing it through a
// function taking the accumulator array by reference made GCC keep the accumulators on the stack
// (-O2 and -O3, even when forced inline), measured in the generated code.
template <std::size_t R, std::size_t C, class Acc, class P>
inline void qk_micro(const Acc* q, std::size_t ldq, const P* kt, std::size_t ldk, std::size_t n, Acc* s,
                     std::size_t lds) {
  constexpr std::size_t w = simd::width<Acc>;
  batch<Acc> acc[R][C];
  each<R * C>([&](auto i) { acc[i / C][i % C] = batch<Acc>(Acc(0)); });
  for (std::size_t d = 0; d < n; ++d) {
    batch<Acc> k[C];
    each<C>([&](auto c) { k[c] = simd::load_as<Acc>(kt + d * ldk + c * w); });
    each<R>([&](auto r) {
      const batch<Acc> qv(q[r * ldq + d]);
      each<C>([&](auto c) { acc[r][c] = xsimd::fma(qv, k[c], acc[r][c]); });
    });
  }
  each<R * C>([&](auto i) { simd::store(s + i / C * lds + i % C * w, acc[i / C][i % C]); });
}

}  // namespace detail

/// s[r, c] = sum_d q[r, d] * key(c)[d] for r < rows, c < cols_padded (a multiple of the batch
/// size), keys packed by pack_kt. Strips outermost: one strip (n x sw) is reused by every row
/// block from L1.
template <class Acc, class P>
void qk_tile(const Acc* q, std::size_t ldq, std::size_t rows, const P* kt, std::size_t n, std::size_t cols_padded,
             Acc* s, std::size_t lds) {
  constexpr std::size_t w = simd::width<Acc>, C = blocking<Acc>::vecs, sw = strip_width<Acc>;
  std::size_t c = 0;
  for (; c + sw <= cols_padded; c += sw)
    detail::by_row_blocks<Acc>(rows, [&](auto R, std::size_t r) {
      detail::qk_micro<decltype(R)::value, C>(q + r * ldq, ldq, kt + c * n, sw, n, s + r * lds + c, lds);
    });
  for (; c < cols_padded; c += w)  // the last, partial strip: one batch at a time
    detail::by_row_blocks<Acc>(rows, [&](auto R, std::size_t r) {
      detail::qk_micro<decltype(R)::value, 1>(q + r * ldq, ldq, kt + c / sw * sw * n + c % sw, sw, n, s + r * lds + c,
                                              lds);
    });
}

namespace detail {

/// s[r, c] for R rows and the 4 keys k[0..3] (key rows of any storage type): each key chunk is
/// loaded once for the R rows, 4·R independent FMA chains. Per (row, key) the lanes accumulate the
/// chunks in order, then hsum, then the scalar tail: the same sums however rows are blocked.
template <std::size_t R, class Acc, class K>
inline void qk_direct_micro(const Acc* q, std::size_t ldq, const K* const* k, std::size_t n, Acc* s, std::size_t lds) {
  constexpr std::size_t w = simd::width<Acc>;
  batch<Acc> acc[R][4];
  each<R * 4>([&](auto i) { acc[i / 4][i % 4] = batch<Acc>(Acc(0)); });
  std::size_t d = 0;
  for (; d + w <= n; d += w) {
    batch<Acc> kv[4];
    each<4>([&](auto c) { kv[c] = simd::load_as<Acc>(k[c] + d); });
    each<R>([&](auto r) {
      const batch<Acc> qv = simd::load(q + r * ldq + d);
      each<4>([&](auto c) { acc[r][c] = xsimd::fma(qv, kv[c], acc[r][c]); });
    });
  }
  each<R * 4>([&](auto i) {
    constexpr std::size_t r = decltype(i)::value / 4, c = decltype(i)::value % 4;
    Acc sum = simd::hsum(acc[r][c]);
    for (std::size_t t = d; t < n; ++t) sum += q[r * ldq + t] * Acc(k[c][t]);
    s[r * lds + c] = sum;
  });
}

}  // namespace detail

/// s[r, c] = q[r, :n] · row(c)[:n] for r < rows, c < cols, reading keys (of any element type) in
/// place: for a few query rows (decoding) packing the keys would cost more memory traffic than the
/// product itself. Blocks of 4 keys by up to 4 rows (2 with AVX2's 16 registers): one key's dot
/// product alone is a chain of dependent FMAs, and a key chunk loaded once serves every row of the
/// block (grouped-query decoding stacks a group's heads as rows). One row, one key at a time ran
/// grouped-query decoding at 6.5 GFLOP/s, its FMA waiting 40 % of the time.
template <class Acc, class RowFn>
void qk_direct(const Acc* q, std::size_t ldq, std::size_t rows, RowFn row, std::size_t cols, std::size_t n, Acc* s,
               std::size_t lds) {
  constexpr std::size_t rmax = sizeof(batch<Acc>) >= 64 ? 4 : 2;
  using K = std::remove_cv_t<std::remove_pointer_t<decltype(row(0))>>;
  for (std::size_t c = 0; c < cols; c += 4) {
    const K* k[4];
    for (std::size_t t = 0; t < 4; ++t) k[t] = row(std::min(c + t, cols - 1));  // a short last block repeats a key
    if (c + 16 < cols)  // keys stream from memory: ask for those 16 ahead while these are multiplied
      for (std::size_t t = c + 16; t < std::min(c + 20, cols); ++t)
        for (std::size_t b = 0; b < n * sizeof(K); b += 64)
          __builtin_prefetch(reinterpret_cast<const char*>(row(t)) + b);
    Acc out[rmax * 4];
    for (std::size_t r = 0; r < rows; r += rmax) {
      const std::size_t rr = std::min(rmax, rows - r), kept = std::min<std::size_t>(4, cols - c);
      auto run = [&](auto R) { detail::qk_direct_micro<decltype(R)::value>(q + r * ldq, ldq, k, n, out, 4); };
      if (rr == rmax)
        run(std::integral_constant<std::size_t, rmax>{});
      else if (rr == 3)
        run(std::integral_constant<std::size_t, 3>{});
      else if (rr == 2)
        run(std::integral_constant<std::size_t, 2>{});
      else
        run(std::integral_constant<std::size_t, 1>{});
      for (std::size_t i = 0; i < rr; ++i)
        for (std::size_t t = 0; t < kept; ++t) s[(r + i) * lds + c + t] = out[i * 4 + t];
    }
  }
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
