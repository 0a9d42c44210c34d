#pragma once
// An independent, unfused double-precision multi-head attention, written from equinox's
// definition: projections by plain loops, per head logits = (q / sqrt(qk)) · k, hidden logits
// = float's lowest (equinox: jnp.where(mask, logits, finfo.min)), two-pass softmax, dropout from
// xattn::random::keep (the documented Philox decision for (key, batch, head, query, key index)),
// weights · v, output projection. Shares no code with the module beyond reading its parameters.
#include <xattn/nn/multihead_attention.hpp>
#include <xattn/random/philox_dropout.hpp>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace nn_test {

using matrix = std::vector<std::vector<double>>;

struct params {
  matrix wq, wk, wv, wo;               // (out, in)
  std::vector<double> bq, bk, bv, bo;  // empty without bias
};

template <class T>
params params_of(const xattn::nn::multihead_attention<T>& m) {
  auto mat = [](const auto& w) {
    matrix r(w.shape()[0], std::vector<double>(w.shape()[1]));
    for (std::size_t o = 0; o < r.size(); ++o)
      for (std::size_t c = 0; c < r[o].size(); ++c) r[o][c] = double(w(o, c));
    return r;
  };
  auto vec = [](const auto& b) { return std::vector<double>(b.begin(), b.end()); };
  return {mat(m.query_proj().weight()),  mat(m.key_proj().weight()), mat(m.value_proj().weight()),
          mat(m.output_proj().weight()), vec(m.query_proj().bias()), vec(m.key_proj().bias()),
          vec(m.value_proj().bias()),    vec(m.output_proj().bias())};
}

/// x (rows, in) -> x Wᵀ + b
inline matrix project(const matrix& x, const matrix& w, const std::vector<double>& b) {
  matrix y(x.size(), std::vector<double>(w.size()));
  for (std::size_t r = 0; r < x.size(); ++r)
    for (std::size_t o = 0; o < w.size(); ++o) {
      double s = b.empty() ? 0 : b[o];
      for (std::size_t c = 0; c < x[r].size(); ++c) s += x[r][c] * w[o][c];
      y[r][o] = s;
    }
  return y;
}

/// Row `b` of a rank-2 (seq, size) or rank-3 (batch, seq, size) tensor as a matrix.
template <class E>
matrix rows(const E& x, std::size_t b) {
  const auto& s = x.shape();
  const bool batched = s.size() == 3;
  matrix m(s[s.size() - 2], std::vector<double>(s.back()));
  for (std::size_t i = 0; i < m.size(); ++i)
    for (std::size_t c = 0; c < m[i].size(); ++c) m[i][c] = batched ? double(x(b, i, c)) : double(x(i, c));
  return m;
}

/// NumPy right-aligned broadcasting of a bool mask read at (b, h, i, j) -- written independently.
inline bool mask_at(const xt::xarray<bool>& m, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
  const std::size_t idx[4] = {b, h, i, j};
  const std::size_t r = m.dimension();
  std::vector<std::size_t> at(r);
  for (std::size_t a = 0; a < r; ++a) at[a] = m.shape()[a] == 1 ? 0 : idx[4 - r + a];
  return m.element(at.begin(), at.end());
}

struct options {
  const xt::xarray<bool>* mask = nullptr;
  std::optional<xattn::random::dropout> drop{};
  bool keep_weights = false;
};

struct result {
  matrix out;                   // (Sq, output_size)
  std::vector<matrix> weights;  // per head (Sq, Skv), before dropout
};

/// One batch element b of query (.., Sq, .), key_ (.., Skv, .), value (.., Skv, .).
template <class Q, class K, class V>
result mha(const xattn::nn::mha_config& c, const params& p, const Q& query, const K& key_, const V& value,
           std::size_t b, const options& opt = {}) {
  const matrix qp = project(rows(query, b), p.wq, p.bq), kp = project(rows(key_, b), p.wk, p.bk),
               vp = project(rows(value, b), p.wv, p.bv);
  const std::size_t sq = qp.size(), skv = kp.size(), group = c.num_heads / c.kv_heads;
  const double lowest = double(std::numeric_limits<float>::lowest());
  matrix attn(sq, std::vector<double>(c.num_heads * c.vo_size, 0.0));
  result r;
  for (std::size_t h = 0; h < c.num_heads; ++h) {
    const std::size_t hk = h / group;
    matrix w(sq, std::vector<double>(skv));
    for (std::size_t i = 0; i < sq; ++i) {
      for (std::size_t j = 0; j < skv; ++j) {
        double s = 0;
        for (std::size_t d = 0; d < c.qk_size; ++d)
          s += qp[i][h * c.qk_size + d] / std::sqrt(double(c.qk_size)) * kp[j][hk * c.qk_size + d];
        w[i][j] = (opt.mask && !mask_at(*opt.mask, b, h, i, j)) ? lowest : s;
      }
      double m = w[i][0], l = 0;
      for (double s : w[i]) m = std::max(m, s);
      for (double& s : w[i]) l += (s = std::exp(s - m));
      for (double& s : w[i]) s /= l;
      for (std::size_t j = 0; j < skv; ++j) {
        double wij = w[i][j];
        if (opt.drop)
          wij = xattn::random::keep(*opt.drop, std::uint32_t(b), std::uint32_t(h), std::uint32_t(i), std::uint32_t(j))
                    ? wij / (1.0 - double(opt.drop->p))
                    : 0.0;
        for (std::size_t e = 0; e < c.vo_size; ++e) attn[i][h * c.vo_size + e] += wij * vp[j][hk * c.vo_size + e];
      }
    }
    if (opt.keep_weights) r.weights.push_back(w);
  }
  r.out = project(attn, p.wo, p.bo);
  return r;
}

/// max over elements of |got - want|, got of rank 2 (unbatched: b = 0) or 3 (batch b).
template <class G>
double max_err(const G& got, const matrix& want, std::size_t b = 0) {
  double e = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    for (std::size_t o = 0; o < want[i].size(); ++o) {
      const double g = got.dimension() == 3 ? double(got(b, i, o)) : double(got(i, o));
      e = std::max(e, std::abs(g - want[i][o]));
    }
  return e;
}

}  // namespace nn_test
