#pragma once
// Additive attention (Bahdanau): score(q, k) = w_v · tanh(W_q q + W_k k), queries and keys of
// different sizes. Not separable, so the kernel projects every query and key once (O((Sq+Skv) h))
// and evaluates the h-term sum per pair inside the fused loop; d2l's (B, Sq, Skv, h) tensor is
// never built.
#include "../dual.hpp"
#include "../kernel/tanh.hpp"
#include "../simd/compat.hpp"
#include "matrix.hpp"

#include <xtensor/xtensor.hpp>

#include <cmath>
#include <span>
#include <tuple>
#include <vector>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn {

/// grad(e).dscore of an additive policy.
struct additive_gradients {
  xt::xtensor<double, 2> d_w_q, d_w_k;  // (h, dq), (h, dk)
  xt::xtensor<double, 1> d_w_v;         // (h)

  auto parts() { return std::tie(d_w_q, d_w_k, d_w_v); }
};

struct additive {
  weights w_q, w_k, w_v;  // (h, dq), (h, dk), (h)
  std::vector<float> w_v_f;
  using parameter_gradients = additive_gradients;

  template <class Wq, class Wk, class Wv>
  additive(const Wq& q, const Wk& k, const Wv& v) : w_q(q), w_k(k), w_v(v), w_v_f(w_v.v.begin(), w_v.v.end()) {}

  void validate(std::size_t dq, std::size_t dk) const {
    if (w_q.cols != dq || w_k.cols != dk || w_q.rows != w_k.rows || w_v.cols != w_q.rows || w_v.rows != 1)
      fail("additive{W_q, W_k, w_v}: W_q is (", w_q.rows, ",", w_q.cols, "), W_k is (", w_k.rows, ",", w_k.cols,
           "), w_v has ", w_v.rows * w_v.cols, " entries; queries have size ", dq, " and keys size ", dk,
           " (need W_q (h,", dq, "), W_k (h,", dk, "), w_v (h))");
  }

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::tanh;  // generic (runs on dual numbers: the reference's gradients)
    using W = widened_t<T>;
    W s = 0;
    for (std::size_t h = 0; h < w_q.rows; ++h) {
      W a = 0;
      for (std::size_t c = 0; c < w_q.cols; ++c) a += w_q(h, c) * W(q[c]);
      for (std::size_t c = 0; c < w_k.cols; ++c) a += w_k(h, c) * W(k[c]);
      s += w_v.v[h] * tanh(a);
    }
    return T(s);
  }

  std::size_t feature_size(std::size_t, std::size_t) const { return w_q.rows; }
  template <class T>
  T project_query(std::span<const T> q, std::span<T> out) const {
    w_q.apply(q.data(), out.data());
    return 0;
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T> out) const {
    w_k.apply(k.data(), out.data());
    return 0;
  }
  template <class T>
  T combine(std::span<const T> fq, std::span<const T> fk) const {
    return combine_into(fq, fk, [](std::size_t, const auto&) {});
  }

  // ---- analytic gradients (policy/gradient.hpp) ----
  additive_gradients zero_gradients() const {
    // filled by the constructor: xt::zeros would instantiate xtensor's assignment machinery in every
    // translation unit, used or not
    return {xt::xtensor<double, 2>({w_q.rows, w_q.cols}, 0.0), xt::xtensor<double, 2>({w_k.rows, w_k.cols}, 0.0),
            xt::xtensor<double, 1>({w_v.cols}, 0.0)};
  }
  template <class T>
  void project_query_backward(std::span<const T> q, std::span<const T> dfq, T, std::span<T> dq,
                              additive_gradients& g) const {
    linear_backward(w_q, g.d_w_q, q, dfq, dq);
  }
  template <class T>
  void project_key_backward(std::span<const T> k, std::span<const T> dfk, T, std::span<T> dk,
                            additive_gradients& g) const {
    linear_backward(w_k, g.d_w_k, k, dfk, dk);
  }
  std::size_t combine_parameter_count() const { return w_v.cols; }
  /// t = tanh(fq + fk): ∂/∂fq = ∂/∂fk = w_v (1 - t²), ∂/∂w_v = t.
  template <class T>
  void combine_backward(std::span<const T> fq, std::span<const T> fk, T ds, std::span<T> dfq, std::span<T> dfk,
                        std::span<T> dw_v) const {
    backward_from(
        fq.size(),
        [&](std::size_t h) { return kernel::tanh<T>(simd::load(fq.data() + h) + simd::load(fk.data() + h)); },
        [&](std::size_t h) { return std::tanh(fq[h] + fk[h]); }, ds, dfq, dfk, dw_v);
  }
  void add_combine_gradients(std::span<const double> dw_v, additive_gradients& g) const {
    for (std::size_t h = 0; h < dw_v.size(); ++h) g.d_w_v(h) += dw_v[h];
  }
  /// The backward keeps t = tanh(fq + fk) from the recomputed score: one tanh per pair and
  /// feature instead of two.
  std::size_t combine_saved_size(std::size_t n) const { return n; }
  template <class T>
  T combine_saving(std::span<const T> fq, std::span<const T> fk, std::span<T> t) const {
    return combine_into(fq, fk, [&](std::size_t h, const auto& th) {
      if constexpr (std::is_arithmetic_v<std::decay_t<decltype(th)>>)
        t[h] = th;
      else
        simd::store(t.data() + h, th);
    });
  }
  template <class T>
  void combine_backward_saved(std::span<const T> t, T ds, std::span<T> dfq, std::span<T> dfk, std::span<T> dw_v) const {
    backward_from(
        t.size(), [&](std::size_t h) { return simd::load(t.data() + h); }, [&](std::size_t h) { return t[h]; }, ds, dfq,
        dfk, dw_v);
  }

 private:
  /// Σ_h w_v[h] · tanh(fq[h] + fk[h]), handing each tanh (a batch, then tail scalars) to keep(h, t).
  template <class T, class Keep>
  T combine_into(std::span<const T> fq, std::span<const T> fk, Keep&& keep) const {
    constexpr std::size_t w = simd::width<T>;
    const std::size_t n = fq.size();
    const T* wv = weights_as<T>();
    simd::batch<T> acc(T(0));
    std::size_t h = 0;
    for (; h + w <= n; h += w) {
      const auto th = kernel::tanh<T>(simd::load(fq.data() + h) + simd::load(fk.data() + h));
      keep(h, th);
      acc = xsimd::fma(simd::load(wv + h), th, acc);
    }
    T s = simd::hsum(acc);
    for (; h < n; ++h) {
      const T th = std::tanh(fq[h] + fk[h]);
      keep(h, th);
      s += wv[h] * th;
    }
    return s;
  }
  /// The combine backward given t = tanh(fq + fk) by batches (t_at) and, in the tail, by scalars.
  template <class T, class Batch, class Scalar>
  void backward_from(std::size_t n, Batch&& t_at, Scalar&& t_scalar, T ds, std::span<T> dfq, std::span<T> dfk,
                     std::span<T> dw_v) const {
    constexpr std::size_t w = simd::width<T>;
    const T* wv = weights_as<T>();
    const simd::batch<T> g(ds), one(T(1));
    std::size_t h = 0;
    for (; h + w <= n; h += w) {
      const auto t = t_at(h);
      const auto u = g * simd::load(wv + h) * (one - t * t);
      simd::store(dfq.data() + h, simd::load(dfq.data() + h) + u);
      simd::store(dfk.data() + h, simd::load(dfk.data() + h) + u);
      simd::store(dw_v.data() + h, xsimd::fma(g, t, simd::load(dw_v.data() + h)));
    }
    for (; h < n; ++h) {
      const T t = t_scalar(h), u = ds * wv[h] * (T(1) - t * t);
      dfq[h] += u;
      dfk[h] += u;
      dw_v[h] += ds * t;
    }
  }
  /// f = W x: dx = Wᵀ df, dW += df ⊗ x.
  template <class T>
  static void linear_backward(const weights& m, xt::xtensor<double, 2>& dm, std::span<const T> x, std::span<const T> df,
                              std::span<T> dx) {
    m.apply_transposed(df.data(), dx.data());
    for (std::size_t r = 0; r < m.rows; ++r) {
      const double d = double(df[r]);
      double* row = dm.data() + r * m.cols;
      for (std::size_t c = 0; c < m.cols; ++c) row[c] += d * double(x[c]);
    }
  }
  template <class T>
  const T* weights_as() const {
    if constexpr (std::is_same_v<T, float>)
      return w_v_f.data();
    else
      return w_v.v.data();
  }
};

}  // namespace xattn

#pragma GCC diagnostic pop
