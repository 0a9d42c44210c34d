#pragma once
// Decoding with a kv_cache, written as a user would: a toy model's attention layer (random
// projections, a small vocabulary) generates tokens greedily for several continuations of each
// prompt. Each prompt is appended whole (prefill: the prompt attends itself, causal), then forked
// so that its continuations share its pages; every step appends one token per sequence and
// attends all sequences as one ragged batch. tests/dsl/test_decode_loop.cpp checks the tokens
// against the same model recomputed from plain tensors; `make demo` prints tokens per second.
#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>

#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsl::decoding {

struct toy_model {
  std::size_t vocab = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  xt::xtensor<float, 2> embed, wq, wk, wv, wo;  // (vocab, d), (d, Hq·D), (d, Hkv·D) twice, (Hq·D, d)

  std::size_t width() const { return q_heads * head_dim; }
};

inline toy_model make_toy_model(std::size_t vocab, std::size_t q_heads, std::size_t kv_heads, std::size_t head_dim,
                                std::uint64_t seed) {
  xt::random::seed(seed);
  toy_model m{vocab, q_heads, kv_heads, head_dim, {}, {}, {}, {}, {}};
  const std::size_t d = m.width(), dk = kv_heads * head_dim;
  const float s = 1.0f / std::sqrt(float(d));
  m.embed = xt::random::randn<float>({vocab, d});
  m.wq = xt::random::randn<float>({d, d}) * s;
  m.wk = xt::random::randn<float>({d, dk}) * s;
  m.wv = xt::random::randn<float>({d, dk}) * s;
  m.wo = xt::random::randn<float>({d, d}) * s;
  return m;
}

namespace detail {

/// y[c] = Σ_r x[r] · w(r, c).
inline std::vector<float> times(const std::vector<float>& x, const xt::xtensor<float, 2>& w) {
  std::vector<float> y(w.shape()[1], 0.0f);
  for (std::size_t r = 0; r < x.size(); ++r)
    for (std::size_t c = 0; c < y.size(); ++c) y[c] += x[r] * w(r, c);
  return y;
}

inline std::vector<float> embedding(const toy_model& m, int token) {
  return {&m.embed(std::size_t(token), 0), &m.embed(std::size_t(token), 0) + m.width()};
}

/// The token after hidden state h = o·Wo + x / 4: the rank-th best of the logits embed·h (a
/// weak residual, so that a token does not simply predict itself).
inline int next_token(const toy_model& m, const std::vector<float>& x, const std::vector<float>& o, std::size_t rank) {
  std::vector<float> h = times(o, m.wo);
  for (std::size_t c = 0; c < h.size(); ++c) h[c] += 0.25f * x[c];
  std::vector<std::pair<float, int>> logits(m.vocab);
  for (std::size_t t = 0; t < m.vocab; ++t) {
    float l = 0;
    for (std::size_t c = 0; c < h.size(); ++c) l += m.embed(t, c) * h[c];
    logits[t] = {-l, int(t)};
  }
  std::nth_element(logits.begin(), logits.begin() + std::ptrdiff_t(rank), logits.end());
  return logits[rank].second;
}

/// (heads, n, D) rows of n tokens' projections by w.
inline xt::xtensor<float, 3> head_rows(const toy_model& m, const std::vector<std::vector<float>>& xs,
                                       const xt::xtensor<float, 2>& w) {
  const std::size_t heads = w.shape()[1] / m.head_dim;
  xt::xtensor<float, 3> r = xt::xtensor<float, 3>::from_shape({heads, xs.size(), m.head_dim});
  for (std::size_t t = 0; t < xs.size(); ++t) {
    const std::vector<float> y = times(xs[t], w);
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t d = 0; d < m.head_dim; ++d) r(h, t, d) = y[h * m.head_dim + d];
  }
  return r;
}

}  // namespace detail

struct decode_run {
  std::vector<std::vector<int>> tokens;  // per sequence: its prompt, then what it generated
  std::vector<std::vector<float>> last;  // per sequence: the last step's attention output (Hq · D)
  double seconds = 0, attention_seconds = 0;
  std::size_t generated = 0;          // tokens generated over all sequences
  std::size_t pages = 0, shared = 0;  // pages the sequences hold, and how many of them a fork shares
};

/// Greedy generation of `steps` tokens for `forks` continuations of each prompt, the keys and
/// values of type T in a kv_cache; continuation f of a prompt takes its f-th best first token.
template <class T>
decode_run generate(const toy_model& m, const std::vector<std::vector<int>>& prompts, std::size_t forks,
                    std::size_t steps) {
  using namespace xattn;
  const auto start = std::chrono::steady_clock::now();
  double attending = 0;
  const auto timed = [&](auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    attending += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const std::size_t D = m.head_dim, Hq = m.q_heads;
  const float scale = 1.0f / std::sqrt(float(D));
  std::size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  // [snippet cache]
  kv_cache<T> cache({.kv_heads = m.kv_heads,
                     .head_dim = D,
                     .page_size = 16,
                     .max_tokens = prompts.size() * forks * (longest + steps + 16)});
  // [end cache]
  decode_run run;
  std::vector<sequence_id> batch;
  std::vector<std::vector<float>> last_x;  // each sequence's newest token's embedding
  std::vector<std::vector<float>> last_o;  // and its attention output
  for (const auto& prompt : prompts) {
    std::vector<std::vector<float>> xs;
    for (int t : prompt) xs.push_back(detail::embedding(m, t));
    // [snippet prefill]
    const sequence_id s = cache.add_sequence();
    cache.append(s, detail::head_rows(m, xs, m.wk), detail::head_rows(m, xs, m.wv));
    xt::xtensor<float, 4> q = xt::xtensor<float, 4>::from_shape({1, Hq, xs.size(), D});
    const xt::xtensor<float, 3> qr = detail::head_rows(m, xs, m.wq);
    std::copy(qr.begin(), qr.end(), q.begin());
    xt::xtensor<float, 4> o;
    timed([&] { o = eval(softmax(mask(ref(q) * trans(cache.keys({s})) * scale, causal())) * cache.values({s})); });
    // [end prefill]
    std::vector<float> out(Hq * D);
    for (std::size_t h = 0; h < Hq; ++h)
      for (std::size_t d = 0; d < D; ++d) out[h * D + d] = o(0, h, xs.size() - 1, d);
    for (std::size_t f = 0; f < forks; ++f) {
      // [snippet fork]
      const sequence_id c = f == 0 ? s : cache.fork(s);  // shares the prompt's pages
      // [end fork]
      batch.push_back(c);
      run.tokens.push_back(prompt);
      run.tokens.back().push_back(detail::next_token(m, xs.back(), out, f));
      last_x.push_back(detail::embedding(m, run.tokens.back().back()));
    }
  }
  const std::size_t B = batch.size();
  xt::xtensor<float, 4> q = xt::xtensor<float, 4>::from_shape({B, Hq, 1, D});
  xt::xtensor<float, 4> o = xt::xtensor<float, 4>::from_shape({B, Hq, 1, D});
  for (std::size_t step = 1; step < steps; ++step) {
    for (std::size_t b = 0; b < B; ++b) {
      const std::vector<std::vector<float>> x{last_x[b]};
      cache.append(batch[b], detail::head_rows(m, x, m.wk), detail::head_rows(m, x, m.wv));
      const xt::xtensor<float, 3> qr = detail::head_rows(m, x, m.wq);
      std::copy(qr.begin(), qr.end(), q.begin() + std::ptrdiff_t(b * Hq * D));
    }
    // [snippet step]
    const auto K = cache.keys(batch), V = cache.values(batch);  // sequences of different lengths
    timed([&] { eval_into(softmax(mask(ref(q) * trans(K) * scale, causal(align::bottom_right))) * V, o); });
    // [end step]
    run.last.clear();
    for (std::size_t b = 0; b < B; ++b) {
      const std::vector<float> out(o.begin() + std::ptrdiff_t(b * Hq * D),
                                   o.begin() + std::ptrdiff_t((b + 1) * Hq * D));
      run.last.push_back(out);
      run.tokens[b].push_back(detail::next_token(m, last_x[b], out, 0));
      last_x[b] = detail::embedding(m, run.tokens[b].back());
    }
  }
  run.generated = B * steps;
  for (std::size_t b = 0; b < B; ++b) {
    const auto& pages = cache.pages(batch[b]);
    run.pages += pages.size();
    if (b % forks != 0)
      for (std::size_t p = 0; p < pages.size(); ++p) run.shared += pages[p] == cache.pages(batch[b - b % forks])[p];
  }
  run.attention_seconds = attending;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

/// The same model without a cache: every step recomputes each sequence's keys and values from
/// its tokens, rounded to T, and attends them as plain tensors (the test's reference).
template <class T>
decode_run generate_without_cache(const toy_model& m, const std::vector<std::vector<int>>& prompts, std::size_t forks,
                                  std::size_t steps) {
  using namespace xattn;
  const std::size_t D = m.head_dim, Hq = m.q_heads;
  const float scale = 1.0f / std::sqrt(float(D));
  decode_run run;
  auto& tokens = run.tokens;
  for (const auto& prompt : prompts)
    for (std::size_t f = 0; f < forks; ++f) tokens.push_back(prompt);
  run.last.resize(tokens.size());
  for (std::size_t b = 0; b < tokens.size(); ++b)
    for (std::size_t step = 0; step < steps; ++step) {
      std::vector<std::vector<float>> xs;
      for (int t : tokens[b]) xs.push_back(detail::embedding(m, t));
      const auto rounded = [](const xt::xtensor<float, 3>& r) {
        xt::xtensor<T, 4> x = xt::xtensor<T, 4>::from_shape({1, r.shape()[0], r.shape()[1], r.shape()[2]});
        std::transform(r.begin(), r.end(), x.begin(), [](float v) { return T(v); });
        return x;
      };
      const xt::xtensor<T, 4> k = rounded(detail::head_rows(m, xs, m.wk)), v = rounded(detail::head_rows(m, xs, m.wv));
      const xt::xtensor<float, 3> qr = detail::head_rows(m, {xs.back()}, m.wq);
      xt::xtensor<float, 4> q = xt::xtensor<float, 4>::from_shape({1, Hq, 1, D});
      std::copy(qr.begin(), qr.end(), q.begin());
      const xt::xtensor<float, 4> o = eval(softmax(ref(q) * trans(ref(k)) * scale) * ref(v));
      const std::vector<float> out(o.begin(), o.end());
      run.last[b] = out;
      tokens[b].push_back(detail::next_token(m, xs.back(), out, step == 0 ? b % forks : 0));
    }
  run.generated = tokens.size() * steps;
  return run;
}

}  // namespace dsl::decoding
