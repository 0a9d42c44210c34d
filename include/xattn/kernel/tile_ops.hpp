#pragma once
// The tile operations the fused kernel is built from. Tiles are row-major with explicit leading
// dimensions; key-axis tiles are padded to whole SIMD batches. Each op is small and tested alone
// (tests/kernel/test_tile_ops.cpp).
#include "../simd/compat.hpp"
#include "exp.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>

namespace xattn::kernel {

using simd::batch;

/// Register blocking: rows broadcast from the left operand x batches of the right one.
/// rows x vecs accumulators + vecs operands + 1 broadcast must fit the register file:
/// 6 x 4 + 5 = 29 of AVX-512's 32, 6 x 2 + 3 = 15 of AVX2's 16 (P·V with at most two rows takes
/// twice the columns: 2 x 8 + 9 = 25, 2 x 4 + 5 = 13).
template <class T>
struct blocking {
  static constexpr std::size_t rows = 6;
  static constexpr std::size_t vecs = sizeof(batch<T>) >= 64 ? 4 : 2;
};

/// Keys packed for the score product come in strips of strip_width columns (one microkernel's
/// width): strip s holds columns [s·sw, s·sw + sw) as n rows of sw contiguous elements, so the
/// microkernel reads its keys in memory order (prefetch-friendly, no L1 set aliasing).
template <class T>
inline constexpr std::size_t strip_width = blocking<T>::vecs * simd::width<T>;

/// Elements of a packed key panel of `cols` columns (whole strips).
template <class T>
constexpr std::size_t packed_kt_size(std::size_t cols, std::size_t n) noexcept {
  return (cols + strip_width<T> - 1) / strip_width<T> * strip_width<T> * n;
}

/// Packs keys 0..cols-1 (key c's features at row(c)[d * dstride]) into strips at kt, which holds
/// packed_kt_size(cols, n) elements; columns past cols are zero.
template <class T, class RowFn>
void pack_kt(RowFn row, std::size_t cols, std::size_t n, std::ptrdiff_t dstride, T* kt) {
  constexpr std::size_t sw = strip_width<T>;
  if (const std::size_t tail = cols % sw; tail != 0) {  // only the last strip has columns past cols
    T* last = kt + cols / sw * sw * n;
    for (std::size_t d = 0; d < n; ++d) std::fill(last + d * sw + tail, last + d * sw + sw, T(0));
  }
  for (std::size_t c = 0; c < cols; ++c) {
    const T* r = row(c);
    T* dst = kt + c / sw * sw * n + c % sw;
    for (std::size_t d = 0; d < n; ++d) dst[d * sw] = r[std::ptrdiff_t(d) * dstride];
  }
}

namespace detail {

/// f(0), ..., f(N - 1) with compile-time indices: the register blocks are unrolled by the language,
/// not left to the optimiser (at -O2 GCC keeps loop-indexed accumulator arrays in memory).
template <std::size_t N, class F>
inline void each(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::integral_constant<std::size_t, I>{}), ...); }(
      std::make_index_sequence<N>{});
}

// qk_micro and pv_micro write out the same rank-1-update loop on purpose: sharing it through a
// function taking the accumulator array by reference made GCC keep the accumulators on the stack
// (-O2 and -O3, even when forced inline), measured in the generated code.
template <std::size_t R, std::size_t C, class T>
inline void qk_micro(const T* q, std::size_t ldq, const T* kt, std::size_t ldk, std::size_t n, T* s, std::size_t lds) {
  constexpr std::size_t w = simd::width<T>;
  batch<T> acc[R][C];
  each<R * C>([&](auto i) { acc[i / C][i % C] = batch<T>(T(0)); });
  for (std::size_t d = 0; d < n; ++d) {
    batch<T> k[C];
    each<C>([&](auto c) { k[c] = simd::load(kt + d * ldk + c * w); });
    each<R>([&](auto r) {
      const batch<T> qv(q[r * ldq + d]);
      each<C>([&](auto c) { acc[r][c] = xsimd::fma(qv, k[c], acc[r][c]); });
    });
  }
  each<R * C>([&](auto i) { simd::store(s + i / C * lds + i % C * w, acc[i / C][i % C]); });
}

/// o[r, c0 + d] += sum_j p[r, j] * v[j, c0 + d] for one register block. The sum over this key block
/// starts from zero and is added to o once: rounding error then grows with block_k, not with Skv.
/// A row whose block sum is not finite is left untouched and flagged (bit r of the result): it may
/// come from 0 * inf/NaN at a key the row gives weight 0, which pv_exact_row recomputes.
template <std::size_t R, std::size_t CC, class T>
inline unsigned pv_micro(const T* p, std::size_t ldp, const T* v, std::size_t ldv, std::size_t keys, T* o,
                         std::size_t ldo) {
  constexpr std::size_t w = simd::width<T>;
  batch<T> acc[R][CC];
  each<R * CC>([&](auto i) { acc[i / CC][i % CC] = batch<T>(T(0)); });
  for (std::size_t j = 0; j < keys; ++j) {
    batch<T> vv[CC];
    each<CC>([&](auto c) { vv[c] = simd::load(v + j * ldv + c * w); });
    each<R>([&](auto r) {
      const batch<T> pr(p[r * ldp + j]);
      each<CC>([&](auto c) { acc[r][c] = xsimd::fma(pr, vv[c], acc[r][c]); });
    });
  }
  unsigned flagged = 0;
  each<R>([&](auto r) {
    batch<T> probe(T(0));  // x - x is 0 for finite x and NaN otherwise
    each<CC>([&](auto c) { probe += acc[r][c] - acc[r][c]; });
    if (xsimd::any(xsimd::isnan(probe))) {
      flagged |= 1u << r;
      return;
    }
    each<CC>([&](auto c) { simd::store(o + r * ldo + c * w, simd::load(o + r * ldo + c * w) + acc[r][c]); });
  });
  return flagged;
}

/// o[:width] += sum over j with p[j] != 0 of p[j] * v[j, :width]: keys of weight exactly 0 are skipped,
/// so an inf or NaN in V reaches only the rows that give its key weight (as in the reference).
template <class T>
inline void pv_exact_row(const T* p, const T* v, std::size_t ldv, std::size_t keys, T* o, std::size_t width) {
  constexpr std::size_t w = simd::width<T>;
  for (std::size_t c = 0; c < width; c += w) {
    batch<T> acc(T(0));
    for (std::size_t j = 0; j < keys; ++j)
      if (p[j] != T(0)) acc = xsimd::fma(batch<T>(p[j]), simd::load(v + j * ldv + c), acc);
    simd::store(o + c, simd::load(o + c) + acc);
  }
}

template <std::size_t R, class T>
inline void pv_micro_rows(const T* p, std::size_t ldp, const T* v, std::size_t ldv, std::size_t keys, T* o,
                          std::size_t ldo, std::size_t dv_padded) {
  constexpr std::size_t w = simd::width<T>, C = blocking<T>::vecs;
  auto run = [&](auto cvecs, std::size_t c0) {
    constexpr std::size_t CC = decltype(cvecs)::value;
    const unsigned flagged = pv_micro<R, CC>(p, ldp, v + c0, ldv, keys, o + c0, ldo);
    for (std::size_t r = 0; flagged != 0 && r < R; ++r)
      if (flagged & (1u << r)) pv_exact_row(p + r * ldp, v + c0, ldv, keys, o + r * ldo + c0, CC * w);
  };
  std::size_t c = 0;
  // One or two rows (decoding) leave registers for twice the columns: D = 128 (fp32, AVX-512) then
  // takes one pass over the value rows instead of two half-row passes, whose stride defeats the
  // prefetcher when V streams from memory. Same sums in the same order: results do not change.
  if constexpr (R <= 2)
    for (; c + 2 * C * w <= dv_padded; c += 2 * C * w) run(std::integral_constant<std::size_t, 2 * C>{}, c);
  for (; c + C * w <= dv_padded; c += C * w) run(std::integral_constant<std::size_t, C>{}, c);
  for (; c < dv_padded; c += w) run(std::integral_constant<std::size_t, 1>{}, c);
}

/// f(R, r) over rows in register blocks of blocking::rows, then one smaller block for the rest.
template <class T, class F>
inline void by_row_blocks(std::size_t rows, F&& f) {
  constexpr std::size_t R = blocking<T>::rows;
  static_assert(R <= 6, "by_row_blocks: add remainder cases for larger blocks");
  std::size_t r = 0;
  for (; r + R <= rows; r += R) f(std::integral_constant<std::size_t, R>{}, r);
  switch (rows - r) {
    case 5: f(std::integral_constant<std::size_t, 5>{}, r); break;
    case 4: f(std::integral_constant<std::size_t, 4>{}, r); break;
    case 3: f(std::integral_constant<std::size_t, 3>{}, r); break;
    case 2: f(std::integral_constant<std::size_t, 2>{}, r); break;
    case 1: f(std::integral_constant<std::size_t, 1>{}, r); break;
    default: break;
  }
}

}  // namespace detail

/// s[r, c] = sum_d q[r, d] * key(c)[d] for r < rows, c < cols_padded (a multiple of the batch
/// size), keys packed by pack_kt. Strips outermost: one strip (n x sw) is reused by every row
/// block from L1.
template <class T>
void qk_tile(const T* q, std::size_t ldq, std::size_t rows, const T* kt, std::size_t n, std::size_t cols_padded, T* s,
             std::size_t lds) {
  constexpr std::size_t w = simd::width<T>, C = blocking<T>::vecs, sw = strip_width<T>;
  std::size_t c = 0;
  for (; c + sw <= cols_padded; c += sw)
    detail::by_row_blocks<T>(rows, [&](auto R, std::size_t r) {
      detail::qk_micro<decltype(R)::value, C>(q + r * ldq, ldq, kt + c * n, sw, n, s + r * lds + c, lds);
    });
  for (; c < cols_padded; c += w)  // the last, partial strip: one batch at a time
    detail::by_row_blocks<T>(rows, [&](auto R, std::size_t r) {
      detail::qk_micro<decltype(R)::value, 1>(q + r * ldq, ldq, kt + c / sw * sw * n + c % sw, sw, n,
                                              s + r * lds + c, lds);
    });
}

/// s[r, c] = q[r, :n] · row(c)[:n] for r < rows, c < cols, reading keys in place: for a few query
/// rows (decoding) packing the keys would cost more memory traffic than the product itself.
template <class T, class RowFn>
void qk_direct(const T* q, std::size_t ldq, std::size_t rows, RowFn row, std::size_t cols, std::size_t n, T* s,
               std::size_t lds) {
  constexpr std::size_t w = simd::width<T>;
  for (std::size_t c = 0; c < cols; ++c) {
    const T* k = row(c);
    for (std::size_t r = 0; r < rows; ++r) {
      const T* qr = q + r * ldq;
      batch<T> acc(T(0));
      std::size_t d = 0;
      for (; d + w <= n; d += w) acc = xsimd::fma(simd::load(qr + d), simd::load(k + d), acc);
      T sum = simd::hsum(acc);
      for (; d < n; ++d) sum += qr[d] * k[d];
      s[r * lds + c] = sum;
    }
  }
}

/// o[r, :] += sum_j p[r, j] * v[j, :] for r < rows, j < keys; v rows readable up to dv_padded. Keys
/// with p[r, j] == 0 (masked, dropped, underflowed) never contribute, even when v[j] is inf or NaN.
template <class T>
void pv_tile(const T* p, std::size_t ldp, std::size_t rows, const T* v, std::size_t ldv, std::size_t keys, T* o,
             std::size_t ldo, std::size_t dv_padded) {
  detail::by_row_blocks<T>(rows, [&](auto R, std::size_t r) {
    detail::pv_micro_rows<decltype(R)::value>(p + r * ldp, ldp, v, ldv, keys, o + r * ldo, ldo, dv_padded);
  });
}

/// max over s[0, n) (n a multiple of the batch size); -inf for an all -inf row. Four independent
/// chains: one chain would be bound by vmaxps latency, not throughput.
template <class T>
T row_max(const T* s, std::size_t n) {
  constexpr std::size_t w = simd::width<T>;
  batch<T> m[4];
  detail::each<4>([&](auto i) { m[i] = batch<T>(-std::numeric_limits<T>::infinity()); });
  std::size_t j = 0;
  for (; j + 4 * w <= n; j += 4 * w) detail::each<4>([&](auto i) { m[i] = xsimd::max(m[i], simd::load(s + j + i * w)); });
  for (; j < n; j += w) m[0] = xsimd::max(m[0], simd::load(s + j));
  return simd::hmax(xsimd::max(xsimd::max(m[0], m[1]), xsimd::max(m[2], m[3])));
}

/// s[j] = 2^(s[j] - m) in place over [0, n) (n a multiple of the batch size); returns the sum.
/// Scores are in base-2 units (natural scores times log2 e). m = -inf (nothing visible yet) is
/// treated as 0 so that -inf scores give 0, never NaN.
template <class T>
T exp_row(T* s, std::size_t n, T m) {
  constexpr std::size_t w = simd::width<T>;
  const batch<T> mv(std::isinf(m) ? T(0) : m);
  batch<T> sum[2] = {batch<T>(T(0)), batch<T>(T(0))};  // two chains, as in row_max
  auto step = [&](std::size_t j, batch<T>& acc) {
    const batch<T> e = exp2_nonpositive(simd::load(s + j) - mv);
    simd::store(s + j, e);
    acc += e;
  };
  std::size_t j = 0;
  for (; j + 2 * w <= n; j += 2 * w) {
    step(j, sum[0]);
    step(j + w, sum[1]);
  }
  if (j < n) step(j, sum[0]);
  return simd::hsum(sum[0] + sum[1]);
}

/// x[0, n) *= c (n a multiple of the batch size).
template <class T>
void scale_row(T* x, std::size_t n, T c) {
  constexpr std::size_t w = simd::width<T>;
  const batch<T> cv(c);
  for (std::size_t j = 0; j < n; j += w) simd::store(x + j, simd::load(x + j) * cv);
}

/// dst[d · dst_stride] = src[d · src_stride] · c for d < n: a task's row copies in (queries, scale
/// folded in) and out (finished output rows). Vector loads and stores when both rows are contiguous:
/// as scalar strided loops these copies took 2 % of a D = 128 pass and more at short Skv (perf).
/// The products are the same either way, so results do not depend on the layout.
template <class T>
void scaled_copy(const T* src, std::ptrdiff_t src_stride, std::size_t n, T c, T* dst, std::ptrdiff_t dst_stride) {
  constexpr std::size_t w = simd::width<T>;
  std::size_t d = 0;
  if (src_stride == 1 && dst_stride == 1) {
    const batch<T> cv(c);
    for (; d + w <= n; d += w) simd::store(dst + d, simd::load(src + d) * cv);
  }
  for (; d < n; ++d) dst[std::ptrdiff_t(d) * dst_stride] = src[std::ptrdiff_t(d) * src_stride] * c;
}

/// s[0, n) *= log2 e (n a multiple of the batch size): natural scores to the softmax's base 2.
/// Saturating: a finite score stays finite (a fill of the lowest float, as equinox writes, must not
/// become -inf, which would mean "excluded"); ±inf and NaN pass unchanged.
template <class T>
void to_base2_row(T* s, std::size_t n) {
  constexpr std::size_t w = simd::width<T>;
  const batch<T> c(static_cast<T>(log2e)), hi(std::numeric_limits<T>::max());
  for (std::size_t j = 0; j < n; j += w) {
    const batch<T> x = simd::load(s + j), r = x * c;
    const auto overflowed = xsimd::abs(r) > hi && xsimd::abs(x) <= hi;  // false for NaN (ordered compares)
    simd::store(s + j, xsimd::select(overflowed, xsimd::select(x < batch<T>(T(0)), -hi, hi), r));
  }
}

/// Running-softmax state of one query row, in base 2: max m and sum l of 2^(s - m).
template <class T>
struct row_state {
  T m = -std::numeric_limits<T>::infinity();
  T l = 0;
};

/// One online-softmax step on a score row (cols_padded wide, base-2 units): turns it into
/// probabilities relative to the new running max, and rescales the output row o (dv_padded wide)
/// only when the max grew. Padding columns must hold -inf.
template <class T>
void online_softmax_row(T* s, std::size_t cols_padded, row_state<T>& st, T* o, std::size_t dv_padded) {
  const T m_new = std::max(st.m, row_max(s, cols_padded));
  if (m_new > st.m && st.l != 0) {
    const T c = std::exp2(st.m - m_new);
    st.l *= c;
    scale_row(o, dv_padded, c);
  }
  st.m = m_new;
  st.l += exp_row(s, cols_padded, m_new);
}

/// Natural log-sum-exp of a finished row: ln(sum e^s) = (m + log2 l) · ln 2; -inf if nothing was
/// visible.
template <class T>
T row_lse(const row_state<T>& st) {
  if (st.l == 0) return -std::numeric_limits<T>::infinity();
  return ((std::isinf(st.m) ? T(0) : st.m) + std::log2(st.l)) * T(0.693147180559945309417);
}

/// out[d * stride] = o[d] / l for d < dv; a row that saw no visible key (l = 0) becomes 0.
template <class T>
void finalize_row(const T* o, std::size_t dv, T l, T* out, std::ptrdiff_t stride) {
  scaled_copy(o, 1, dv, l == 0 ? T(0) : T(1) / l, out, stride);
}

}  // namespace xattn::kernel
