#pragma once
// Additive attention (Bahdanau): score(q, k) = w_v · tanh(W_q q + W_k k), queries and keys of
// different sizes. Not separable, so the kernel projects every query and key once (O((Sq+Skv) h))
// and evaluates the h-term sum per pair inside the fused loop; d2l's (B, Sq, Skv, h) tensor is
// never built.
#include "../simd/compat.hpp"
#include "matrix.hpp"

#include <cmath>
#include <span>
#include <vector>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace xattn {

struct additive {
  weights w_q, w_k, w_v;  // (h, dq), (h, dk), (h)
  std::vector<float> w_v_f;

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
    std::vector<double> a(w_q.rows), b(w_k.rows);
    w_q.apply(q.data(), a.data());
    w_k.apply(k.data(), b.data());
    double s = 0;
    for (std::size_t h = 0; h < a.size(); ++h) s += w_v.v[h] * std::tanh(a[h] + b[h]);
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
    constexpr std::size_t w = simd::width<T>;
    const std::size_t n = fq.size();
    const T* wv = weights_as<T>();
    simd::batch<T> acc(T(0));
    std::size_t h = 0;
    for (; h + w <= n; h += w)
      acc = xsimd::fma(simd::load(wv + h), xsimd::tanh(simd::load(fq.data() + h) + simd::load(fk.data() + h)), acc);
    T s = simd::hsum(acc);
    for (; h < n; ++h) s += wv[h] * std::tanh(fq[h] + fk[h]);
    return s;
  }

 private:
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
