#pragma once
// The score product S = Q · Kᵀ of one tile: against packed key panels (qk_tile, its microkernel
// qk_micro), or reading key rows where they lie (qk_direct, for decoding). Queries come in the
// accumulator type Acc; keys in any storage type, converted as they are loaded.
#include "blocking.hpp"
#include "q8_row.hpp"
#include "row_walk.hpp"
#include "trace.hpp"

#include <algorithm>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

/// qk_tile's default epilogue: each register block's sums stored as they are. An epilogue's at(r, c)
/// binds the block whose first row and column are r and c; the bound one gets each row i of the
/// block, its C batches of sums and where they go (columns c, c + w, ...), and may store something
/// else: the backward fuses its elementwise steps into the products this way (backward.hpp), on
/// registers instead of another pass over the tile.
struct plain_epilogue {
  struct bound {
    template <class Acc, std::size_t C>
    [[gnu::always_inline]] void operator()(std::size_t, const batch<Acc> (&acc)[C], Acc* dst) const {
      detail::each(
          detail::upto<C>, [&](std::size_t c)
                               __attribute__((always_inline)) { simd::store(dst + c * simd::width<Acc>, acc[c]); });
    }
  };
  constexpr bound at(std::size_t, std::size_t) const noexcept { return {}; }
};

namespace detail {

// qk_micro and pv_micro write out the same rank-1-update loop on purpose: shared through a
// function taking the accumulator array by reference, GCC keeps the accumulators on the stack
// (-O2 and -O3, even when forced inline).
template <std::size_t R, std::size_t C, class Acc, class P, class Epi = plain_epilogue::bound>
inline void qk_micro(const Acc* q, std::size_t ldq, const P* kt, std::size_t ldk, std::size_t n, Acc* s,
                     std::size_t lds, const Epi& epi = {}) {
  constexpr std::size_t w = simd::width<Acc>;
  batch<Acc> acc[R][C];
  each(
      upto<R * C>, [&](std::size_t i) __attribute__((always_inline)) { acc[i / C][i % C] = batch<Acc>(Acc(0)); });
  for (std::size_t d = 0; d < n; ++d) {
    batch<Acc> k[C];
    each(
        upto<C>, [&](std::size_t c)
                     __attribute__((always_inline)) { k[c] = simd::load_as<Acc>(kt + d * ldk + c * w); });
    each(
        upto<R>, [&](std::size_t r) __attribute__((always_inline)) {
          const batch<Acc> qv(q[r * ldq + d]);
          each(
              upto<C>, [&](std::size_t c)
                           __attribute__((always_inline)) { acc[r][c] = xsimd::fma(qv, k[c], acc[r][c]); });
        });
  }
  each(
      upto<R>, [&](std::size_t r) __attribute__((always_inline)) { epi(r, acc[r], s + r * lds); });
}

}  // namespace detail

/// s[r, c] = sum_d q[r, d] * key(c)[d] for r < rows, c < cols_padded (a multiple of the batch
/// size), keys packed by pack_kt. Strips outermost: one strip (n x sw) is reused by every row
/// block from L1. A register block whose columns lie outside range(r, R) is written as 0; the
/// others go through the epilogue (plain_epilogue: stored as they are).
template <class Acc, class P, class Range = every_column, class Epi = plain_epilogue>
void qk_tile(const Acc* q, std::size_t ldq, std::size_t rows, const P* kt, std::size_t n, std::size_t cols_padded,
             Acc* s, std::size_t lds, Range range = {}, const Epi& epi = {}) {
  trace::note(op_on<P>(operation::qk_tile));
  if constexpr (requires { Epi::op; }) trace::note(Epi::op);
  constexpr std::size_t w = simd::width<Acc>, C = blocking<Acc>::vecs, sw = strip_width<Acc>;
  const auto needed = [&](std::size_t r, std::size_t R, std::size_t c, std::size_t width) {
    const auto [lo, hi] = range(r, R);
    if (c < hi && lo < c + width) return true;
    for (std::size_t i = 0; i < R; ++i) std::fill(s + (r + i) * lds + c, s + (r + i) * lds + c + width, Acc(0));
    return false;
  };
  std::size_t c = 0;
  for (; c + sw <= cols_padded; c += sw)
    detail::by_row_blocks<Acc>(rows, [&](auto R, std::size_t r) {
      if (needed(r, R, c, sw))
        detail::qk_micro<decltype(R)::value, C>(q + r * ldq, ldq, kt + c * n, sw, n, s + r * lds + c, lds,
                                                epi.at(r, c));
    });
  for (; c < cols_padded; c += w)  // the last, partial strip: one batch at a time
    detail::by_row_blocks<Acc>(rows, [&](auto R, std::size_t r) {
      if (needed(r, R, c, w))
        detail::qk_micro<decltype(R)::value, 1>(q + r * ldq, ldq, kt + c / sw * sw * n + c % sw, sw, n, s + r * lds + c,
                                                lds, epi.at(r, c));
    });
}

namespace detail {

/// The 16 lane sums of a[0..15] as the lanes of one batch, in order: a halving tree of 30
/// shuffles and 15 adds where 16 separate sums take 64 of each. Lane i adds a[i]'s lanes in the
/// order of _mm512_reduce_add_ps (simd::hsum), so either gives the same bits.
template <class B>  // a template, so the AVX-512 intrinsics are only instantiated for AVX-512 batches
inline B lane_sums16(const B (&a)[16]) noexcept {
  // Inputs enter in the order that makes lane 4q + e end up with the sum of a[4q + e].
  constexpr std::size_t in[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
  __m512 z[8], m[4], h[2];
  for (std::size_t i = 0; i < 8; ++i)  // 128-bit quarters: (q0 + q2, q1 + q3) of two inputs
    z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[in[2 * i]], a[in[2 * i + 1]], 0x44),
                         _mm512_shuffle_f32x4(a[in[2 * i]], a[in[2 * i + 1]], 0xEE));
  for (std::size_t i = 0; i < 4; ++i)  // one quarter per input: q0 + q1 + q2 + q3
    m[i] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * i], z[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(z[2 * i], z[2 * i + 1], 0xDD));
  for (std::size_t i = 0; i < 2; ++i)  // within quarters: elements 0 + 2 and 1 + 3
    h[i] =
        _mm512_add_ps(_mm512_shuffle_ps(m[2 * i], m[2 * i + 1], 0x44), _mm512_shuffle_ps(m[2 * i], m[2 * i + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(h[0], h[1], 0x88), _mm512_shuffle_ps(h[0], h[1], 0xDD));
}

/// The 4 lane sums of a[0..3] as the lanes of one 128-bit batch, in order: lane_sums16's tree for
/// four inputs, 9 shuffles and 5 adds where 4 separate sums take 16 of each, the same bits.
template <class B>
inline __m128 lane_sums4(const B (&a)[4]) noexcept {
  // 128-bit quarters (q0 + q2, q1 + q3) of a[0], a[1] in z0, of a[2], a[3] in z1
  const __m512 z0 = _mm512_add_ps(_mm512_shuffle_f32x4(a[0], a[1], 0x44), _mm512_shuffle_f32x4(a[0], a[1], 0xEE));
  const __m512 z1 = _mm512_add_ps(_mm512_shuffle_f32x4(a[2], a[3], 0x44), _mm512_shuffle_f32x4(a[2], a[3], 0xEE));
  // quarter i: a[i]'s q0 + q1 + q2 + q3; then within quarters elements 0 + 2 and 1 + 3, and their sum
  const __m512 m = _mm512_add_ps(_mm512_shuffle_f32x4(z0, z1, 0x88), _mm512_shuffle_f32x4(z0, z1, 0xDD));
  const __m512 h = _mm512_add_ps(m, _mm512_permute_ps(m, 0x4E));
  const __m512 t = _mm512_add_ps(h, _mm512_permute_ps(h, 0xB1));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), t));
}

/// s[r * lds + t] = scale · tail(i, lane sum of acc[r][t]) for r < R, t < kept, i = 4r + t;
/// tail adds what the lanes did not hold. A full block of AVX-512 floats is summed by one tree and
/// stored a row at a time from the register: 16 scalar reloads of a vector store would wait for
/// store forwarding, a stall that dominates decoding's score product.
template <std::size_t R, class Acc, class Tail>
inline void store_sums(const batch<Acc> (&acc)[R][4], Acc scale, bool has_tail, Tail tail, Acc* s, std::size_t lds,
                       std::size_t kept) {
  alignas(64) Acc out[R * 4];
  if constexpr (R == 4 && std::is_same_v<Acc, float> && sizeof(batch<Acc>) == 64) {
    batch<Acc> flat[16];
    each(
        upto<16>, [&](std::size_t i) __attribute__((always_inline)) { flat[i] = acc[i / 4][i % 4]; });
    const batch<Acc> sums = lane_sums16(flat);
    if (kept == 4 && !has_tail) {
      const __m512 scaled = sums * batch<Acc>(scale);
      each(upto<4>, [&](auto r) { _mm_storeu_ps(s + r * lds, _mm512_extractf32x4_ps(scaled, decltype(r)::value)); });
      return;
    }
    simd::store(out, sums);
  } else if constexpr (std::is_same_v<Acc, float> && sizeof(batch<Acc>) == 64) {  // a tree per row
    const bool whole = kept == 4 && !has_tail;
    each(
        upto<R>, [&](auto r) __attribute__((always_inline)) {
          const __m128 sums = lane_sums4(acc[decltype(r)::value]);
          if (whole)
            _mm_storeu_ps(s + r * lds, _mm_mul_ps(sums, _mm_set1_ps(scale)));
          else
            _mm_store_ps(out + 4 * r, sums);
        });
    if (whole) return;
  } else {
    each(
        upto<R * 4>, [&](std::size_t i) __attribute__((always_inline)) { out[i] = simd::hsum(acc[i / 4][i % 4]); });
  }
  for (std::size_t i = 0; i < R * 4; ++i)
    if (i % 4 < kept) s[i / 4 * lds + i % 4] = tail(i, out[i]) * scale;
}

/// s[r, t] for R rows and the 4 keys k[0..3] (key rows of any storage type: pointers, or q8_row
/// handles), the first `kept` written: each key chunk is loaded once for the R rows, 4·R
/// independent FMA chains. Per (row, key) the lanes accumulate the chunks in order, then hsum, then
/// the scalar tail: the same sums however rows are blocked.
template <std::size_t R, class Acc, class K>
inline void qk_direct_micro(const Acc* q, std::size_t ldq, const K* k, std::size_t n, Acc* s, std::size_t lds,
                            std::size_t kept) {
  constexpr std::size_t w = simd::width<Acc>;
  batch<Acc> acc[R][4];
  each(
      upto<R * 4>, [&](std::size_t i) __attribute__((always_inline)) { acc[i / 4][i % 4] = batch<Acc>(Acc(0)); });
  std::size_t d = 0;
  for (; d + w <= n; d += w) {
    batch<Acc> kv[4];
    each(
        upto<4>, [&](std::size_t c)
                     __attribute__((always_inline)) { kv[c] = simd::in_register(simd::load_as<Acc>(k[c] + d)); });
    each(
        upto<R>, [&](std::size_t r) __attribute__((always_inline)) {
          const batch<Acc> qv = simd::in_register(simd::load(q + r * ldq + d));
          each(
              upto<4>, [&](std::size_t c)
                           __attribute__((always_inline)) { acc[r][c] = xsimd::fma(qv, kv[c], acc[r][c]); });
        });
  }
  const auto tail = [&](std::size_t i, Acc sum) {
    for (std::size_t t = d; t < n; ++t) sum += q[i / 4 * ldq + t] * Acc(k[i % 4][t]);
    return sum;
  };
  store_sums<R>(acc, Acc(1), d < n, tail, s, lds, kept);
}

/// Query rows per block of the products reading keys in place: 4 with AVX-512's 32 registers, 2
/// with AVX2's 16 (4 keys' accumulators for each row, plus the loaded chunks).
template <class Acc>
inline constexpr std::size_t direct_rows = sizeof(batch<Acc>) >= 64 ? 4 : 2;

}  // namespace detail

/// Rows of a second stream prefetched along with the keys read in place: also(t, n) for keys
/// [t, t + n) as their own prefetches are issued, a call per block of keys. Decoding from a
/// cache's pages passes the same block's values, so that both streams are in flight while the
/// scores are computed, instead of the values waiting for the softmax.
struct row_prefetch {
  void (*fn)(const void*, std::size_t, std::size_t) = nullptr;
  const void* ctx = nullptr;
  void operator()(std::size_t t, std::size_t n) const {
    if (fn && n > 0) fn(ctx, t, n);
  }
};

/// A row_prefetch of rows(t), `bytes` of each (into L2), for as long as it lives. Rows that name
/// the extent of their page (a cache's) are stepped through it rather than looked up one by one.
template <class Rows>
struct rows_prefetch {
  const Rows& rows;
  std::size_t bytes;
  row_prefetch handle() const noexcept {
    return {[](const void* c, std::size_t t, std::size_t n) {
              const auto* self = static_cast<const rows_prefetch*>(c);
              for_each_row(self->rows, t, t + n, [&](std::size_t, auto r) { prefetch_row<1>(r, self->bytes); });
            },
            this};
  }
};

namespace detail {

/// f(R, r) over the query rows in blocks of rmax (4 or 2), the last block 3, 2 or 1 rows.
template <std::size_t rmax, class F>
[[gnu::always_inline]] inline void by_direct_rows(std::size_t rows, F&& f) {
  for (std::size_t r = 0; r < rows; r += rmax) {
    const std::size_t rr = std::min(rmax, rows - r);
    if (rr == rmax)
      f(std::integral_constant<std::size_t, rmax>{}, r);
    else if (rr == 3)
      f(std::integral_constant<std::size_t, 3>{}, r);
    else if (rr == 2)
      f(std::integral_constant<std::size_t, 2>{}, r);
    else
      f(std::integral_constant<std::size_t, 1>{}, r);
  }
}

/// micro(R, r, k, s_block, kept) over the query rows in blocks of up to rmax and the keys in
/// blocks of 4 (k: their rows as row(c) gives them, a short last block repeating a key; s_block: where the
/// block's scores go, kept of its keys written). Keys stream from memory: the rows of the block at
/// least 16 keys and 4 KiB ahead are prefetched into L2 (into L1, they stream more slowly; short
/// rows, as int8's, need more keys in flight to cover the memory's latency). also(t, n) follows each
/// block's prefetches.
template <std::size_t rmax, class Acc, class RowFn, class Micro>
void direct_blocks(std::size_t rows, RowFn row, std::size_t cols, std::size_t row_bytes, Acc* s, std::size_t lds,
                   Micro micro, row_prefetch also) {
  using K = decltype(row(0));
  const std::size_t ahead = std::max<std::size_t>(16, (4096 / std::max<std::size_t>(row_bytes, 1) + 3) / 4 * 4);
  row_cursor<RowFn> keys{row, 0}, prefetched{row, ahead};  // a page lookup per page, not per key
  for (std::size_t c = 0; c < cols; c += 4) {
    K k[4];
    for (std::size_t t = 0; t < 4; ++t) k[t] = c + t < cols ? keys.next() : k[t - 1];
    if (c + ahead < cols) {
      const std::size_t end = std::min(c + ahead + 4, cols);
      for (std::size_t t = c + ahead; t < end; ++t) prefetch_row<1>(prefetched.next(), row_bytes);
      also(c + ahead, end - c - ahead);
    }
    const std::size_t kept = std::min<std::size_t>(4, cols - c);
    by_direct_rows<rmax>(rows, [&](auto R, std::size_t r) { micro(R, r, k, s + r * lds + c, kept); });
  }
}

/// qk_direct's products on rows of any format, each key chunk converted to Acc in registers.
template <class Acc, class RowFn>
void qk_direct_widened(const Acc* q, std::size_t ldq, std::size_t rows, RowFn row, std::size_t cols, std::size_t n,
                       Acc* s, std::size_t lds, row_prefetch also) {
  trace::note(op_on<decltype(row(0))>(operation::qk_direct));
  constexpr std::size_t rmax = direct_rows<Acc>;
  using K = decltype(row(0));
  direct_blocks<rmax>(
      rows, row, cols, n * sizeof(row_element_t<K>), s, lds,
      [&](auto R, std::size_t r, const K* k, Acc* sb, std::size_t kept) {
        qk_direct_micro<decltype(R)::value>(q + r * ldq, ldq, k, n, sb, lds, kept);
      },
      also);
}

}  // namespace detail

/// s[r, c] = q[r, :n] · row(c)[:n] for r < rows, c < cols, reading keys (of any element type) in
/// place: for a few query rows (decoding) packing the keys would cost more memory traffic than the
/// product itself. Blocks of 4 keys by up to 4 rows (2 with AVX2's 16 registers): one key's dot
/// product alone is a chain of dependent FMAs, and a key chunk loaded once serves every row of the
/// block (grouped-query decoding stacks a group's heads as rows). also: rows to prefetch with the keys.
/// (A format with products of its own adds an overload for its rows, as qk_q8.hpp does for int8.)
template <class Acc, class RowFn>
void qk_direct(const Acc* q, std::size_t ldq, std::size_t rows, RowFn row, std::size_t cols, std::size_t n, Acc* s,
               std::size_t lds, row_prefetch also = {}) {
  detail::qk_direct_widened(q, ldq, rows, row, cols, n, s, lds, also);
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
