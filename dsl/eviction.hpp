#pragma once
// Decoding within a fixed cache budget, written as a user would: the toy model of decode_loop.hpp
// reads a long sequence token by token (teacher forcing: the same tokens whatever the cache keeps),
// and once its cache holds more than `budget` tokens, kv_cache::keep evicts down to the budget:
//   streaming  StreamingLLM: the first `sinks` tokens (attention sinks) and the newest ones;
//   h2o        H2O: the newest half of the budget and the heavy hitters, the tokens that received
//              the most attention so far (each step's softmax weights, summed over the query heads);
//   full       no eviction (the reference).
// Each step's attention output is compared with the full cache's: how far eviction drifts.
// tests/dsl/test_eviction.cpp checks each step against the same attention over the kept tokens
// recomputed from plain tensors; `make demo` prints the drift.
#include "decode_loop.hpp"

#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <vector>

namespace dsl::eviction {

enum class policy { full, streaming, h2o };

struct eviction_run {
  std::vector<std::vector<float>> outputs;  // per step: the attention output (Hq · D)
  std::vector<std::vector<int>> kept;       // per step: the tokens' indices the cache held
  double drift = 0;                         // mean over steps of |out - out(full)| / |out(full)|
};

/// Reads `tokens` one at a time (each appended, then its query attends the cache), keeping at most
/// `budget` tokens by `how`; `full` gives the reference outputs the drift is measured against.
inline eviction_run run(const decoding::toy_model& m, const std::vector<int>& tokens, policy how, std::size_t budget,
                        std::size_t sinks, const eviction_run* full = nullptr) {
  using namespace xattn;
  const std::size_t D = m.head_dim, Hq = m.q_heads;
  const float scale = 1.0f / std::sqrt(float(D));
  kv_cache<float> cache({.kv_heads = m.kv_heads, .head_dim = D, .page_size = 16, .max_tokens = tokens.size() + 16});
  const sequence_id s = cache.add_sequence();
  std::vector<int> held;     // which token each cached row is
  std::vector<double> mass;  // the attention each cached row received so far (h2o)
  xt::xtensor<float, 4> q = xt::xtensor<float, 4>::from_shape({1, Hq, 1, D});
  eviction_run out;
  double drift = 0;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const std::vector<std::vector<float>> x{decoding::detail::embedding(m, tokens[t])};
    cache.append(s, decoding::detail::head_rows(m, x, m.wk), decoding::detail::head_rows(m, x, m.wv));
    held.push_back(int(t));
    mass.push_back(0);
    const xt::xtensor<float, 3> qr = decoding::detail::head_rows(m, x, m.wq);
    std::copy(qr.begin(), qr.end(), q.begin());
    const auto K = cache.keys({s}), V = cache.values({s});
    // [snippet mass]
    // the output, and the weights each cached token received this step summed over the query
    // heads of its key head: key_mass is (1, Hkv, cached), from the same pass
    const auto [o, key_mass] = eval_with_key_mass(softmax(ref(q) * trans(K) * scale) * V);
    for (std::size_t hk = 0; hk < m.kv_heads && how == policy::h2o; ++hk)
      for (std::size_t j = 0; j < held.size(); ++j) mass[j] += key_mass(0, hk, j);
    // [end mass]
    out.outputs.emplace_back(o.begin(), o.end());
    out.kept.push_back(held);
    if (full) {
      double num = 0, den = 0;
      for (std::size_t i = 0; i < o.size(); ++i) {
        num += std::pow(double(o.data()[i]) - full->outputs[t][i], 2);
        den += std::pow(double(full->outputs[t][i]), 2);
      }
      drift += std::sqrt(num / den);
    }
    if (how == policy::full || held.size() <= budget) continue;
    // [snippet evict]
    std::vector<std::size_t> keep;  // rows of the cache to keep, in order
    const std::size_t recent = how == policy::streaming ? budget - sinks : budget / 2;
    for (std::size_t j = 0; j < held.size(); ++j) {
      const bool newest = j + recent >= held.size();
      if (how == policy::streaming ? j < sinks || newest : newest) keep.push_back(j);
    }
    if (how == policy::h2o) {  // the heavy hitters among the older rows fill the rest of the budget
      std::vector<std::size_t> older(held.size() - recent);
      std::iota(older.begin(), older.end(), std::size_t(0));
      std::partial_sort(older.begin(), older.begin() + std::ptrdiff_t(budget - recent), older.end(),
                        [&](std::size_t a, std::size_t b) { return mass[a] > mass[b]; });
      keep.insert(keep.end(), older.begin(), older.begin() + std::ptrdiff_t(budget - recent));
      std::sort(keep.begin(), keep.end());
    }
    cache.keep(s, keep);
    // [end evict]
    std::vector<int> h2;
    std::vector<double> m2;
    for (std::size_t j : keep) h2.push_back(held[j]), m2.push_back(mass[j]);
    held = std::move(h2), mass = std::move(m2);
  }
  out.drift = full ? drift / double(tokens.size()) : 0;
  return out;
}

/// The attention output of token t's query over the given tokens' keys and values, from plain
/// tensors (the test's reference).
inline std::vector<float> attend(const decoding::toy_model& m, const std::vector<int>& tokens, int t,
                                 const std::vector<int>& over) {
  using namespace xattn;
  std::vector<std::vector<float>> xs;
  for (int i : over) xs.push_back(decoding::detail::embedding(m, tokens[std::size_t(i)]));
  const auto as4 = [](const xt::xtensor<float, 3>& r) {
    xt::xtensor<float, 4> x = xt::xtensor<float, 4>::from_shape({1, r.shape()[0], r.shape()[1], r.shape()[2]});
    std::copy(r.begin(), r.end(), x.begin());
    return x;
  };
  const auto k = as4(decoding::detail::head_rows(m, xs, m.wk)), v = as4(decoding::detail::head_rows(m, xs, m.wv));
  const auto q = as4(decoding::detail::head_rows(m, {decoding::detail::embedding(m, tokens[std::size_t(t)])}, m.wq));
  const xt::xtensor<float, 4> o = eval(softmax(ref(q) * trans(ref(k)) / std::sqrt(float(m.head_dim))) * ref(v));
  return {o.begin(), o.end()};
}

}  // namespace dsl::eviction
