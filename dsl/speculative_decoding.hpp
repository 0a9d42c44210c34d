#pragma once
// Speculative decoding with a draft tree, written as a user would: a cheap draft model (the toy
// target of decode_loop.hpp with noisy weights) proposes a tree of tokens after each sequence's
// pending token; the target verifies the whole tree in one attention pass over its kv_cache with
// tree_mask(parents), each tree token seeing the prefix and its own ancestors; the longest path
// the target agrees with is accepted, plus the target's own next token after it, and the cache is
// rolled back to the prefix (truncate) and given the accepted path's keys and values. The tokens
// are exactly greedy decoding's (tests/dsl/test_speculative_decoding.cpp); only fewer passes run.
#include "decode_loop.hpp"

#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>

#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace dsl::speculative {

using decoding::toy_model;

/// A model with each vocabulary token's projections precomputed: the toy has no positions, so a
/// token's query, key and value rows never change, and the draft reruns attention for every node.
struct tabled_model {
  toy_model m;
  xt::xtensor<float, 2> q, k, v;  // (vocab, Hq · D), (vocab, Hkv · D) twice
};

inline tabled_model with_tables(toy_model m) {
  std::vector<std::vector<float>> xs;
  for (std::size_t t = 0; t < m.vocab; ++t) xs.push_back(decoding::detail::embedding(m, int(t)));
  const auto table = [&](const xt::xtensor<float, 2>& w) {
    xt::xtensor<float, 2> r = xt::xtensor<float, 2>::from_shape({m.vocab, w.shape()[1]});
    for (std::size_t t = 0; t < m.vocab; ++t) {
      const std::vector<float> y = decoding::detail::times(xs[t], w);
      std::copy(y.begin(), y.end(), &r(t, 0));
    }
    return r;
  };
  tabled_model d{m, table(m.wq), table(m.wk), table(m.wv)};
  return d;
}

/// The draft: the target's weights with Gaussian noise of relative size `noise` on its projections.
inline tabled_model make_draft(const toy_model& target, float noise, std::uint64_t seed) {
  xt::random::seed(seed);
  toy_model d = target;
  for (auto* w : {&d.wq, &d.wk, &d.wv, &d.wo}) {
    const float s = noise / std::sqrt(float(w->shape()[0]));
    *w += xt::random::randn<float>(w->shape()) * s;
  }
  return with_tables(std::move(d));
}

/// The attention output (Hq · D) of the last of `tokens` over all of them, from plain tensors, keys
/// and values rounded to T: the draft's forward pass (a draft keeps no cache here; it is small).
template <class T = float>
std::vector<float> attend_last(const tabled_model& d, const std::vector<int>& tokens) {
  using namespace xattn;
  const std::size_t n = tokens.size(), D = d.m.head_dim, Hq = d.m.q_heads, Hkv = d.m.kv_heads;
  xt::xtensor<float, 4> q = xt::xtensor<float, 4>::from_shape({1, Hq, 1, D});
  xt::xtensor<T, 4> k = xt::xtensor<T, 4>::from_shape({1, Hkv, n, D}), v = k;
  std::copy_n(&d.q(std::size_t(tokens.back()), 0), Hq * D, q.begin());
  for (std::size_t h = 0; h < Hkv; ++h)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < D; ++c) {
        k(0, h, i, c) = T(d.k(std::size_t(tokens[i]), h * D + c));
        v(0, h, i, c) = T(d.v(std::size_t(tokens[i]), h * D + c));
      }
  const xt::xtensor<float, 4> o = eval(softmax(ref(q) * trans(ref(k)) / std::sqrt(float(D))) * ref(v));
  return {o.begin(), o.end()};
}

/// A draft tree in breadth-first order: tokens[0] is the pending token (the target's own choice,
/// certain), parents[t] < t, parents[0] = -1.
struct draft_tree {
  std::vector<int> tokens, parents, depth;
};

/// The draft expands the pending token: every node at depth d gets its branching[d] best next tokens.
inline draft_tree propose(const tabled_model& draft, const std::vector<int>& history,
                          const std::vector<std::size_t>& branching) {
  draft_tree tree{{history.back()}, {-1}, {0}};
  for (std::size_t d = 0; d < branching.size(); ++d) {
    const std::size_t last = tree.tokens.size();
    for (std::size_t node = 0; node < last; ++node) {
      if (tree.depth[node] != int(d)) continue;
      std::vector<int> path;  // the node's ancestors, root first, then the node
      for (int u = int(node); u >= 0; u = tree.parents[std::size_t(u)]) path.push_back(tree.tokens[std::size_t(u)]);
      std::vector<int> seen(history.begin(), history.end() - 1);
      seen.insert(seen.end(), path.rbegin(), path.rend());
      const std::vector<float> o = attend_last(draft, seen);
      const std::vector<float> x = decoding::detail::embedding(draft.m, seen.back());
      for (std::size_t r = 0; r < branching[d]; ++r) {
        tree.tokens.push_back(decoding::detail::next_token(draft.m, x, o, r));
        tree.parents.push_back(int(node));
        tree.depth.push_back(int(d) + 1);
      }
    }
  }
  return tree;
}

struct speculative_run {
  std::vector<std::vector<int>> tokens;  // per sequence: its prompt, then what it generated
  // per sequence and generated token: the target's attention output (Hq · D) it was chosen from
  std::vector<std::vector<std::vector<float>>> outputs;
  std::size_t verifications = 0;  // target passes over the batch (prefill aside)
  std::size_t accepted = 0;       // tokens the target kept from the drafts (pending tokens aside)
  std::size_t tree_tokens = 0;    // draft tokens per tree, the root included
};

/// Greedy decoding of at least `steps` tokens per prompt by the target, the draft's trees verified
/// by the target in one pass per step over a ragged batch of the sequences' caches.
template <class T>
speculative_run generate(const toy_model& target, const tabled_model& draft,
                         const std::vector<std::vector<int>>& prompts, std::size_t steps,
                         const std::vector<std::size_t>& branching) {
  using namespace xattn;
  const std::size_t D = target.head_dim, Hq = target.q_heads, B = prompts.size();
  const float scale = 1.0f / std::sqrt(float(D));
  std::size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  std::size_t n = 1, level = 1;  // the tree's size, from its shape
  for (std::size_t b : branching) n += level *= b;
  kv_cache<T> cache(
      {.kv_heads = target.kv_heads, .head_dim = D, .page_size = 16, .max_tokens = B * (longest + steps + 2 * n + 16)});

  speculative_run run;
  run.tree_tokens = n;
  std::vector<sequence_id> batch;
  for (const auto& prompt : prompts) {  // prefill: the prompt's keys, and the target's first token
    std::vector<std::vector<float>> xs;
    for (int t : prompt) xs.push_back(decoding::detail::embedding(target, t));
    const sequence_id s = cache.add_sequence();
    cache.append(s, decoding::detail::head_rows(target, xs, target.wk),
                 decoding::detail::head_rows(target, xs, target.wv));
    xt::xtensor<float, 4> q = xt::xtensor<float, 4>::from_shape({1, Hq, xs.size(), D});
    const xt::xtensor<float, 3> qr = decoding::detail::head_rows(target, xs, target.wq);
    std::copy(qr.begin(), qr.end(), q.begin());
    const xt::xtensor<float, 4> o =
        eval(softmax(mask(ref(q) * trans(cache.keys({s})) * scale, causal())) * cache.values({s}));
    std::vector<float> out(Hq * D);
    for (std::size_t h = 0; h < Hq; ++h)
      for (std::size_t d = 0; d < D; ++d) out[h * D + d] = o(0, h, xs.size() - 1, d);
    batch.push_back(s);
    run.tokens.push_back(prompt);
    run.tokens.back().push_back(decoding::detail::next_token(target, xs.back(), out, 0));  // pending: not cached yet
    run.outputs.push_back({out});
  }

  xt::xtensor<int, 1> parents = xt::xtensor<int, 1>::from_shape({n});  // one tree shape for the whole batch
  for (;;) {
    std::vector<std::size_t> active;  // the sequences still generating: finished ones leave the batch
    for (std::size_t b = 0; b < B; ++b)
      if (run.tokens[b].size() < prompts[b].size() + steps) active.push_back(b);
    if (active.empty()) break;
    const std::size_t A = active.size();
    std::vector<sequence_id> ids;
    std::vector<draft_tree> trees;
    std::vector<xt::xtensor<float, 3>> krows, vrows;
    xt::xtensor<float, 4> q = xt::xtensor<float, 4>::from_shape({A, Hq, n, D});
    xt::xtensor<float, 4> o = xt::xtensor<float, 4>::from_shape({A, Hq, n, D});
    for (std::size_t a = 0; a < A; ++a) {
      const std::size_t b = active[a];
      ids.push_back(batch[b]);
      trees.push_back(propose(draft, run.tokens[b], branching));
      std::vector<std::vector<float>> xs;
      for (int t : trees[a].tokens) xs.push_back(decoding::detail::embedding(target, t));
      krows.push_back(decoding::detail::head_rows(target, xs, target.wk));
      vrows.push_back(decoding::detail::head_rows(target, xs, target.wv));
      cache.append(ids[a], krows[a], vrows[a]);  // the whole tree, after the prefix
      const xt::xtensor<float, 3> qr = decoding::detail::head_rows(target, xs, target.wq);
      std::copy(qr.begin(), qr.end(), q.begin() + std::ptrdiff_t(a * Hq * n * D));
    }
    std::copy(trees[0].parents.begin(), trees[0].parents.end(), parents.begin());
    // [snippet verify]
    const auto K = cache.keys(ids), V = cache.values(ids);  // prefixes of different lengths, then the trees
    eval_into(softmax(mask(ref(q) * trans(K) * scale, tree_mask(parents))) * V, o);
    // [end verify]
    ++run.verifications;
    for (std::size_t a = 0; a < A; ++a) {
      const draft_tree& tree = trees[a];
      std::vector<int> next(n);  // the target's greedy token after each tree token's path
      std::vector<std::vector<float>> outs(n, std::vector<float>(Hq * D));
      for (std::size_t t = 0; t < n; ++t) {
        for (std::size_t h = 0; h < Hq; ++h)
          for (std::size_t d = 0; d < D; ++d) outs[t][h * D + d] = o(a, h, t, d);
        next[t] = decoding::detail::next_token(target, decoding::detail::embedding(target, tree.tokens[t]), outs[t], 0);
      }
      std::vector<std::size_t> path{0};  // the root is the pending token: the target chose it
      for (bool found = true; found;) {
        found = false;
        for (std::size_t c = path.back() + 1; c < n && !found; ++c)
          if (tree.parents[c] == int(path.back()) && tree.tokens[c] == next[path.back()])
            path.push_back(c), found = true;
      }
      // [snippet rollback]
      cache.truncate(ids[a], cache.length(ids[a]) - n);  // drop the whole tree, then keep the accepted path
      xt::xtensor<float, 3> k = xt::xtensor<float, 3>::from_shape({target.kv_heads, path.size(), D}), v = k;
      for (std::size_t h = 0; h < target.kv_heads; ++h)
        for (std::size_t i = 0; i < path.size(); ++i)
          for (std::size_t d = 0; d < D; ++d)
            k(h, i, d) = krows[a](h, path[i], d), v(h, i, d) = vrows[a](h, path[i], d);
      cache.append(ids[a], k, v);
      // [end rollback]
      auto& tokens = run.tokens[active[a]];
      for (std::size_t i = 1; i < path.size(); ++i) tokens.push_back(tree.tokens[path[i]]);
      tokens.push_back(next[path.back()]);  // the new pending token
      for (std::size_t i : path) run.outputs[active[a]].push_back(outs[i]);
      run.accepted += path.size() - 1;
    }
  }
  for (std::size_t b = 0; b < B; ++b) run.tokens[b].resize(prompts[b].size() + steps), run.outputs[b].resize(steps);
  return run;
}

}  // namespace dsl::speculative
