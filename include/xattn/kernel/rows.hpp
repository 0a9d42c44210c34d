#pragma once
// Operations on one row of a tile: the online softmax in base 2 (row_max, exp_row,
// online_softmax_row, row_lse), the weights of a finished row, and converting row copies in and
// out of a task (scaled_copy, finalize_row).
#include "blocking.hpp"
#include "exp.hpp"
#include "q8_row.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::kernel {

/// max over s[0, n) (n a multiple of the batch size); -inf for an all -inf row. Four independent
/// chains: one chain would be bound by vmaxps latency, not throughput.
template <class T>
T row_max(const T* s, std::size_t n) {
  constexpr std::size_t w = simd::width<T>;
  batch<T> m[4];
  detail::each(
      detail::upto<4>, [&](std::size_t i)
                           __attribute__((always_inline)) { m[i] = batch<T>(-std::numeric_limits<T>::infinity()); });
  std::size_t j = 0;
  for (; j + 4 * w <= n; j += 4 * w)
    detail::each(
        detail::upto<4>, [&](std::size_t i)
                             __attribute__((always_inline)) { m[i] = xsimd::max(m[i], simd::load(s + j + i * w)); });
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

/// dst[d · dst_stride] = src[d · src_stride] · c for d < n, converting between element types
/// (computed in C's type): a task's rows in (queries, the scale folded in) and out (finished
/// output rows), and every gather of a strided row. Vector loads and stores when both rows are
/// contiguous and the destination holds C, since every row of every task goes through here. The
/// products are the same either way, so results do not depend on the layout.
template <class Src, class Dst, class C>
void scaled_copy(const Src* src, std::ptrdiff_t src_stride, std::size_t n, C c, Dst* dst, std::ptrdiff_t dst_stride) {
  std::size_t d = 0;
  if constexpr (std::is_same_v<Dst, C>) {
    constexpr std::size_t w = simd::width<C>;
    if (src_stride == 1 && dst_stride == 1) {
      const batch<C> cv(c);
      for (; d + w <= n; d += w) simd::store(dst + d, simd::load_as<C>(src + d) * cv);
    }
  }
  for (; d < n; ++d) dst[std::ptrdiff_t(d) * dst_stride] = Dst(C(src[std::ptrdiff_t(d) * src_stride]) * c);
}

/// scaled_copy from a row handle (a quantized row, always contiguous: src_stride is 1), dequantized.
template <class R, class Dst, class C>
requires requires(const R& r) { r.template load<C>(); }
void scaled_copy(const R& src, std::ptrdiff_t, std::size_t n, C c, Dst* dst, std::ptrdiff_t dst_stride) {
  std::size_t d = 0;
  if constexpr (std::is_same_v<Dst, C>)
    if (dst_stride == 1) {
      constexpr std::size_t w = simd::width<C>;
      const batch<C> cv(c);
      for (; d + w <= n; d += w) simd::store(dst + d, simd::load_as<C>(src + d) * cv);
    }
  for (; d < n; ++d) dst[std::ptrdiff_t(d) * dst_stride] = Dst(C(src[std::ptrdiff_t(d)]) * c);
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

/// The state of a row that starts with a softmax term of logit t (base-2 units; an attention sink):
/// a key every row sees, holding no value -- max t, sum 1, and the output row stays 0. t = -inf: none.
template <class T>
row_state<T> term_state(T t) {
  if (std::isinf(t) && t < 0) return {};
  return {t, T(1)};
}

/// One online-softmax step on a score row (cols_padded wide, base-2 units): turns it into
/// probabilities relative to the new running max, and rescales the output row o (dv_padded wide)
/// only when the max grew. Padding columns must hold -inf. Without an output row (o = nullptr)
/// it only tracks the max and the sum.
template <class T>
void online_softmax_row(T* s, std::size_t cols_padded, row_state<T>& st, T* o, std::size_t dv_padded) {
  const T m_new = std::max(st.m, row_max(s, cols_padded));
  if (m_new > st.m && st.l != 0) {
    const T c = std::exp2(st.m - m_new);
    st.l *= c;
    if (o) scale_row(o, dv_padded, c);
  }
  st.m = m_new;
  st.l += exp_row(s, cols_padded, m_new);
}

/// The softmax weights of a finished row: s[j] = 2^(s[j] - m) / l over [0, n) (n a multiple of the
/// batch size), from the row's final state; 0 everywhere if nothing was visible (l = 0).
template <class T>
void weights_row(T* s, std::size_t n, const row_state<T>& st) {
  if (st.l == 0) {
    std::fill(s, s + n, T(0));
    return;
  }
  exp_row(s, n, st.m);
  scale_row(s, n, T(1) / st.l);
}

/// Natural log-sum-exp of a finished row: ln(sum e^s) = (m + log2 l) · ln 2; -inf if nothing was
/// visible.
template <class T>
T row_lse(const row_state<T>& st) {
  if (st.l == 0) return -std::numeric_limits<T>::infinity();
  return ((std::isinf(st.m) ? T(0) : st.m) + std::log2(st.l)) * T(0.693147180559945309417);
}

/// out[d * stride] = o[d] / l for d < dv, converted to the output's type; a row that saw no
/// visible key (l = 0) becomes 0.
template <class T, class Out>
void finalize_row(const T* o, std::size_t dv, T l, Out* out, std::ptrdiff_t stride) {
  scaled_copy(o, 1, dv, l == 0 ? T(0) : T(1) / l, out, stride);
}

}  // namespace xattn::kernel

#pragma GCC diagnostic pop
