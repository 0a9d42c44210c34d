#pragma once
// O += P · V for one tile (pv_tile, its microkernel pv_micro): probabilities in the accumulator
// type, values in any storage type, converted as they are loaded. Value rows are read through an
// accessor: rows ld apart (strided_rows), or any other placement such as a paged cache's.
#include "blocking.hpp"
#include "pv_q8.hpp"
#include "q8_row.hpp"
#include "row_walk.hpp"
#include "trace.hpp"

#include <type_traits>
#include <utility>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

namespace detail {

/// The CC batches of Acc of a row from its first column on: load_as for each, bit for bit (kept
/// in registers if InRegister, see simd::in_register). A q8_0 row starting on a batch boundary has
/// its codes and scales located once for the row: through its handle, per batch, the lookups cost
/// more than the dequantization (decoding's P·V); a format that decodes whole groups at once (q4)
/// does so.
template <bool InRegister, class Acc, std::size_t CC, class Row>
inline void load_row_as(const Row& row, batch<Acc> (&out)[CC]) noexcept {
  constexpr std::size_t w = simd::width<Acc>;
  if constexpr (std::is_same_v<Row, q8_row> && q8_widens<Acc>)
    if (row.col % w == 0) {
      const std::int8_t* codes = row.q + row.col;
      each(upto<CC>,
           [&](auto c) { out[c] = q8_batch<Acc>(codes + c * w, row.scale[(row.col + c * w) / q8_row::group]); });
      return;
    }
  if constexpr (requires { row.template load_groups<Acc, CC>(out); })
    if (row.template load_groups<Acc, CC>(out)) return;
  if constexpr (InRegister)
    each(upto<CC>, [&](auto c) { out[c] = simd::in_register(simd::load_as<Acc>(row + c * w)); });
  else
    each(upto<CC>, [&](auto c) { out[c] = simd::load_as<Acc>(row + c * w); });
}

/// Element (r, j) of the left operand: p[r, j], or p[j, r] when it is stored transposed (PT).
template <bool PT>
constexpr std::size_t p_at(std::size_t r, std::size_t j, std::size_t ldp) noexcept {
  return PT ? j * ldp + r : r * ldp + j;
}

/// o[r, c0 + d] += sum_j p[r, j] * v[j, c0 + d] for one register block. The sum over this key block
/// starts from zero and is added to o once: rounding error then grows with block_k, not with Skv.
/// A row whose block sum is not finite is left untouched and flagged (bit r of the result): it may
/// come from 0 * inf/NaN at a key the row gives weight 0, which pv_exact_row recomputes.
template <std::size_t R, std::size_t CC, bool PT = false, class Acc, class Rows>
inline unsigned pv_micro(const Acc* p, std::size_t ldp, const Rows& v, std::size_t keys, Acc* o, std::size_t ldo) {
  using V = typename Rows::element;
  constexpr std::size_t w = simd::width<Acc>;
  batch<Acc> acc[R][CC];
  each(
      upto<R * CC>, [&](std::size_t i) __attribute__((always_inline)) { acc[i / CC][i % CC] = batch<Acc>(Acc(0)); });
  row_cursor<Rows> ahead{v, 16};
  for_each_row(v, 0, keys, [&](std::size_t j, auto row) {
    if constexpr (R <= 4)  // few rows (decoding): values stream from memory, ask for those 16 keys ahead
      if (j + 16 < keys) prefetch_row(ahead.next(), CC * w * sizeof(V));
    batch<Acc> vv[CC];
    load_row_as<false>(row, vv);
    each(
        upto<R>, [&](std::size_t r) __attribute__((always_inline)) {
          const batch<Acc> pr(p[p_at<PT>(r, j, ldp)]);
          each(
              upto<CC>, [&](std::size_t c)
                            __attribute__((always_inline)) { acc[r][c] = xsimd::fma(pr, vv[c], acc[r][c]); });
        });
  });
  unsigned flagged = 0;
  each(
      upto<R>, [&](std::size_t r) __attribute__((always_inline)) {
        batch<Acc> probe(Acc(0));  // x - x is 0 for finite x and NaN otherwise
        each(
            upto<CC>, [&](std::size_t c) __attribute__((always_inline)) { probe += acc[r][c] - acc[r][c]; });
        if (xsimd::any(xsimd::isnan(probe))) {
          flagged |= 1u << r;
          return;
        }
        each(
            upto<CC>, [&](std::size_t c) __attribute__((always_inline)) {
              simd::store(o + r * ldo + c * w, simd::load(o + r * ldo + c * w) + acc[r][c]);
            });
      });
  return flagged;
}

/// o[:width] += sum over j with p[j] != 0 of p[j] * v[j, :width]: keys of weight exactly 0 are skipped,
/// so an inf or NaN in V reaches only the rows that give its key weight (as in the reference).
/// p's keys are ps apart (1, or ldp when p is stored transposed).
template <class Acc, class Rows>
inline void pv_exact_row(const Acc* p, std::size_t ps, const Rows& v, std::size_t keys, Acc* o, std::size_t width) {
  constexpr std::size_t w = simd::width<Acc>;
  for (std::size_t c = 0; c < width; c += w) {
    batch<Acc> acc(Acc(0));
    for (std::size_t j = 0; j < keys; ++j)
      if (p[j * ps] != Acc(0)) acc = xsimd::fma(batch<Acc>(p[j * ps]), simd::load_as<Acc>(v(j) + c), acc);
    simd::store(o + c, simd::load(o + c) + acc);
  }
}

/// f(CC, c0) over the columns [0, dv_padded) of R output rows in register blocks of CC batches.
/// One or two rows (decoding) leave registers for twice the columns: D = 128 (fp32, AVX-512) then
/// takes one pass over the value rows instead of two half-row passes, whose stride defeats the
/// prefetcher when V streams from memory. The blocking never changes a sum.
template <std::size_t R, class Acc, class F>
inline void by_column_blocks(std::size_t dv_padded, F&& f) {
  constexpr std::size_t w = simd::width<Acc>, C = blocking<Acc>::vecs;
  std::size_t c = 0;
  if constexpr (R <= 2)
    for (; c + 2 * C * w <= dv_padded; c += 2 * C * w) f(std::integral_constant<std::size_t, 2 * C>{}, c);
  for (; c + C * w <= dv_padded; c += C * w) f(std::integral_constant<std::size_t, C>{}, c);
  for (; c < dv_padded; c += w) f(std::integral_constant<std::size_t, 1>{}, c);
}

/// pv_micro's loop continued: part[r, :CC·w] += sum_j p[r, j] * v[j, :] over keys [0, keys), the
/// sums loaded from and stored back to part, so that a key range split into pieces accumulates
/// exactly as one pass. Row j + ahead_keys is prefetched, ahead_bytes of it.
template <std::size_t R, std::size_t CC, bool PT, class Acc, class Rows>
inline void pv_micro_continue(const Acc* p, std::size_t ldp, const Rows& v, std::size_t keys, Acc* part,
                              std::size_t ldpart, std::size_t ahead_keys, std::size_t ahead_bytes) {
  constexpr std::size_t w = simd::width<Acc>;
  batch<Acc> acc[R][CC];
  each(
      upto<R * CC>, [&](std::size_t i) __attribute__((always_inline)) {
        acc[i / CC][i % CC] = simd::load(part + i / CC * ldpart + i % CC * w);
      });
  for_each_row(v, 0, keys, [&](std::size_t j, auto row) {
    if (ahead_bytes != 0) prefetch_row<1>(v(j + ahead_keys), ahead_bytes);  // 0: that row may not exist
    batch<Acc> vv[CC];
    load_row_as<true>(row, vv);
    each(
        upto<R>, [&](std::size_t r) __attribute__((always_inline)) {
          const batch<Acc> pr(p[p_at<PT>(r, j, ldp)]);
          each(
              upto<CC>, [&](std::size_t c)
                            __attribute__((always_inline)) { acc[r][c] = xsimd::fma(pr, vv[c], acc[r][c]); });
        });
  });
  each(
      upto<R * CC>, [&](std::size_t i) __attribute__((always_inline)) {
        simd::store(part + i / CC * ldpart + i % CC * w, acc[i / CC][i % CC]);
      });
}

/// Keys per piece, and output columns per pass, of pv_streaming_rows.
inline constexpr std::size_t stream_keys = 16, stream_cols = 256;

/// pv_micro_rows for a few rows whose value rows stream from memory (decoding), bitwise the same:
/// pieces of stream_keys keys, each piece's whole value rows (up to stream_cols columns) used while
/// they are in L1, the piece after next prefetched into L2, the sums parked in part between
/// pieces. Used where pv_micro_rows would take several column passes over all the keys, each
/// reading one cache line per value row at a stride, which keeps decoding's streamed K and V far
/// below the memory's read bandwidth.
template <std::size_t R, bool PT, class Acc, class Rows>
inline void pv_streaming_rows(const Acc* p, std::size_t ldp, const Rows& v, std::size_t keys, Acc* o, std::size_t ldo,
                              std::size_t dv_padded) {
  using V = typename Rows::element;
  constexpr std::size_t w = simd::width<Acc>;
  alignas(64) Acc part[R * stream_cols];
  for (std::size_t c0 = 0; c0 < dv_padded; c0 += stream_cols) {
    const std::size_t width = std::min(stream_cols, dv_padded - c0);
    std::fill(part, part + R * stream_cols, Acc(0));
    for (std::size_t j0 = 0; j0 < keys; j0 += stream_keys) {
      const std::size_t kk = std::min(stream_keys, keys - j0),
                        ahead = j0 + 3 * stream_keys <= keys ? width * sizeof(V) : 0;
      by_column_blocks<R, Acc>(width, [&](auto cvecs, std::size_t c) {
        pv_micro_continue<R, decltype(cvecs)::value, PT>(p + p_at<PT>(0, j0, ldp), ldp, v.at(j0, c0 + c), kk, part + c,
                                                         stream_cols, 2 * stream_keys, c == 0 ? ahead : 0);
      });
    }
    by_column_blocks<R, Acc>(width, [&](auto cvecs, std::size_t c) {  // pv_micro's check, per column block
      constexpr std::size_t CC = decltype(cvecs)::value;
      for (std::size_t r = 0; r < R; ++r) {
        const Acc* sums = part + r * stream_cols + c;
        Acc* out = o + r * ldo + c0 + c;
        batch<Acc> probe(Acc(0));
        each(
            upto<CC>, [&](std::size_t i) __attribute__((always_inline)) {
              probe += simd::load(sums + i * w) - simd::load(sums + i * w);
            });
        if (xsimd::any(xsimd::isnan(probe)))
          pv_exact_row(p + p_at<PT>(r, 0, ldp), PT ? ldp : 1, v.at(0, c0 + c), keys, out, CC * w);
        else
          each(
              upto<CC>, [&](std::size_t i) __attribute__((always_inline)) {
                simd::store(out + i * w, simd::load(out + i * w) + simd::load(sums + i * w));
              });
      }
    });
  }
}

template <std::size_t R, bool PT = false, class Acc, class Rows>
inline void pv_micro_rows(const Acc* p, std::size_t ldp, const Rows& v, std::size_t keys, Acc* o, std::size_t ldo,
                          std::size_t dv_padded) {
  constexpr std::size_t w = simd::width<Acc>, one_pass = (R <= 2 ? 2 : 1) * blocking<Acc>::vecs * w;
  if constexpr (R <= 4) {
    // whatever the number of keys: a key range's bits must not depend on how many keys of weight 0
    // follow it (a ragged batch against its padded tensor)
    if constexpr (!PT && std::is_same_v<Acc, float> && std::is_same_v<decltype(v(0)), q8_row>)
      if (pv_q8_rows<R>(p, ldp, v, keys, o, ldo, dv_padded)) return;
    if (keys > 2 * stream_keys && dv_padded > one_pass)
      return pv_streaming_rows<R, PT>(p, ldp, v, keys, o, ldo, dv_padded);
  }
  by_column_blocks<R, Acc>(dv_padded, [&](auto cvecs, std::size_t c0) {
    constexpr std::size_t CC = decltype(cvecs)::value;
    const unsigned flagged = pv_micro<R, CC, PT>(p, ldp, v.at(0, c0), keys, o + c0, ldo);
    for (std::size_t r = 0; flagged != 0 && r < R; ++r)
      if (flagged & (1u << r))
        pv_exact_row(p + p_at<PT>(r, 0, ldp), PT ? ldp : 1, v.at(0, c0), keys, o + r * ldo + c0, CC * w);
  });
}

/// pv_tile and pv_tile_transposed: row blocks of the output, each over its keys range(r, R).
template <bool PT, class Acc, class Rows, class Range>
void pv_tile_rows(const Acc* p, std::size_t ldp, std::size_t rows, const Rows& v, std::size_t keys, Acc* o,
                  std::size_t ldo, std::size_t dv_padded, Range range) {
  by_row_blocks<Acc>(rows, [&](auto R, std::size_t r) {
    const auto bounds = range(r, R);  // named, not bound: lambdas below capture lo (clang 14 cannot)
    const std::size_t lo = bounds.first, j1 = std::min(bounds.second, keys);
    if (lo < j1)
      pv_micro_rows<decltype(R)::value, PT>(p + p_at<PT>(r, lo, ldp), ldp, v.at(lo, 0), j1 - lo, o + r * ldo, ldo,
                                            dv_padded);
  });
}

/// pv_tile_rows with the values packed by pack_strips: strip s (columns [s·sw, s·sw + sw)) at
/// v + s · strip_stride, sw elements per key. Each register block is one strip (or a batch of the
/// last, partial one), so the sums are pv_tile's, bit for bit.
template <bool PT, class Acc, class V, class Range>
void pv_strips_rows(const Acc* p, std::size_t ldp, std::size_t rows, const V* v, std::size_t strip_stride,
                    std::size_t keys, Acc* o, std::size_t ldo, std::size_t dv_padded, Range range) {
  constexpr std::size_t w = simd::width<Acc>, C = blocking<Acc>::vecs, sw = strip_width<Acc>;
  by_row_blocks<Acc>(rows, [&](auto R, std::size_t r) {
    const auto bounds = range(r, R);  // named, not bound: lambdas below capture lo (clang 14 cannot)
    const std::size_t lo = bounds.first, j1 = std::min(bounds.second, keys);
    if (lo >= j1) return;
    const Acc* pr = p + p_at<PT>(r, lo, ldp);
    const auto block = [&](auto cvecs, std::size_t c) {  // columns [c, c + CC·w), in strip c / sw
      constexpr std::size_t CC = decltype(cvecs)::value;
      const strided_rows<V> vs{v + c / sw * strip_stride + lo * sw + c % sw, sw};
      const unsigned flagged = pv_micro<decltype(R)::value, CC, PT>(pr, ldp, vs, j1 - lo, o + r * ldo + c, ldo);
      for (std::size_t i = 0; flagged != 0 && i < R; ++i)
        if (flagged & (1u << i))
          pv_exact_row(pr + p_at<PT>(i, 0, ldp), PT ? ldp : 1, vs, j1 - lo, o + (r + i) * ldo + c, CC * w);
    };
    std::size_t c = 0;
    for (; c + sw <= dv_padded; c += sw) block(std::integral_constant<std::size_t, C>{}, c);
    for (; c < dv_padded; c += w) block(std::integral_constant<std::size_t, 1>{}, c);
  });
}

}  // namespace detail

/// o[r, :] += sum_j p[r, j] * v[j, :] for r < rows, j < keys; v rows readable up to dv_padded. Keys
/// with p[r, j] == 0 (masked, dropped, underflowed) never contribute, even when v[j] is inf or NaN.
/// Rows [r, r + R) sum over keys range(r, R) only (the others have weight 0 in every row).
template <class Acc, class V, class Range = every_column>
void pv_tile(const Acc* p, std::size_t ldp, std::size_t rows, const V* v, std::size_t ldv, std::size_t keys, Acc* o,
             std::size_t ldo, std::size_t dv_padded, Range range = {}) {
  trace::note(op_on<V>(operation::pv_tile));
  detail::pv_tile_rows<false>(p, ldp, rows, strided_rows<V>{v, std::ptrdiff_t(ldv)}, keys, o, ldo, dv_padded, range);
}

namespace detail {

/// A cache's int8 or q4 value rows (pair row handles of rows stored one after the other) as the
/// handles of rows alone, whose loads locate a row's codes and scales once: the P·V loops of decoding.
template <class Rows>
struct rows_alone {
  using element = typename Rows::element;
  using pair_row = decltype(std::declval<const Rows&>()(0));
  using row = decltype(std::declval<const pair_row&>().as_row());
  Rows v;

  row operator()(std::size_t j) const noexcept { return v(j).as_row(); }
  rows_alone at(std::size_t j, std::size_t c) const noexcept { return {v.at(j, c)}; }
  std::size_t same_page(std::size_t j) const noexcept requires requires(const Rows& x) { x.same_page(j); }
  { return v.same_page(j); }
  row next(const row& r) const noexcept requires requires(const Rows& x, const pair_row& p) { x.next(p); }
  { return v.next(pair_row{r.q, r.scale, r.col, 1}).as_row(); }
};

}  // namespace detail

/// pv_tile reading value row j through the accessor v (v(j): its first element; v.at(j0, c0): the
/// rows from j0 on, columns from c0 on): rows in pages, for example. The same sums as pv_tile over
/// the same values, bit for bit; int8 rows of a decoding step's few query rows, on integer
/// products where the build has them (pv_q8.hpp), within the rounding of their weights.
template <class Acc, class Rows, class Range = every_column>
void pv_tile_at(const Acc* p, std::size_t ldp, std::size_t rows, const Rows& v, std::size_t keys, Acc* o,
                std::size_t ldo, std::size_t dv_padded, Range range = {}) {
  trace::note(op_on<decltype(v(0))>(operation::pv_tile));
  if constexpr (requires { v(0).as_row(); })
    if (keys > 0 && v(0).alone())  // every row of an accessor is laid out alike
      return detail::pv_tile_rows<false>(p, ldp, rows, detail::rows_alone<Rows>{v}, keys, o, ldo, dv_padded, range);
  detail::pv_tile_rows<false>(p, ldp, rows, v, keys, o, ldo, dv_padded, range);
}

/// o[r, :] += sum_j p[j, r] * v[j, :]: pv_tile with p stored transposed (keys x rows, ldp apart),
/// the backward's dV += Pᵀ·dO and dK += dSᵀ·Q without a transpose: the microkernel broadcasts
/// p's elements one at a time, so it reads them along either axis at the same cost.
/// Output rows [r, r + R) sum over range(r, R) only, as pv_tile.
template <class Acc, class V, class Range = every_column>
void pv_tile_transposed(const Acc* p, std::size_t ldp, std::size_t rows, const V* v, std::size_t ldv, std::size_t keys,
                        Acc* o, std::size_t ldo, std::size_t dv_padded, Range range = {}) {
  detail::pv_tile_rows<true>(p, ldp, rows, strided_rows<V>{v, std::ptrdiff_t(ldv)}, keys, o, ldo, dv_padded, range);
}

/// pv_tile with v packed by pack_strips (strips strip_stride apart), the same bits: the forward's
/// P·V when many query rows read each value row. Read in place, every row block would miss L1 once
/// per value row; packed, it reads its values in memory order.
template <class Acc, class V, class Range = every_column>
void pv_tile_strips(const Acc* p, std::size_t ldp, std::size_t rows, const V* v, std::size_t strip_stride,
                    std::size_t keys, Acc* o, std::size_t ldo, std::size_t dv_padded, Range range = {}) {
  trace::note(op_on<V>(operation::pv_tile_strips));
  detail::pv_strips_rows<false>(p, ldp, rows, v, strip_stride, keys, o, ldo, dv_padded, range);
}

/// pv_tile_transposed with v packed by pack_strips: the backward's dV += Pᵀ·dO and dK += dSᵀ·Q.
template <class Acc, class V, class Range = every_column>
void pv_tile_transposed_strips(const Acc* p, std::size_t ldp, std::size_t rows, const V* v, std::size_t strip_stride,
                               std::size_t keys, Acc* o, std::size_t ldo, std::size_t dv_padded, Range range = {}) {
  trace::note(op_on<V>(operation::pv_tile_transposed_strips));
  detail::pv_strips_rows<true>(p, ldp, rows, v, strip_stride, keys, o, ldo, dv_padded, range);
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
