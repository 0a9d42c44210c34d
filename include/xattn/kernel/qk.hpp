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

/// s[r, c] = q[r, :n] · row(c)[:n] for r < rows, c < cols, reading keys (of any element type) in
/// place: for a few query rows (decoding) packing the keys would cost more memory traffic than the
/// product itself.
template <class Acc, class RowFn>
void qk_direct(const Acc* q, std::size_t ldq, std::size_t rows, RowFn row, std::size_t cols, std::size_t n, Acc* s,
               std::size_t lds) {
  constexpr std::size_t w = simd::width<Acc>;
  for (std::size_t c = 0; c < cols; ++c) {
    const auto* k = row(c);
    for (std::size_t r = 0; r < rows; ++r) {
      const Acc* qr = q + r * ldq;
      batch<Acc> acc(Acc(0));
      std::size_t d = 0;
      for (; d + w <= n; d += w) acc = xsimd::fma(simd::load(qr + d), simd::load_as<Acc>(k + d), acc);
      Acc sum = simd::hsum(acc);
      for (; d < n; ++d) sum += qr[d] * Acc(k[d]);
      s[r * lds + c] = sum;
    }
  }
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
