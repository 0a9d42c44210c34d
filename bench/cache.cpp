// "cache_append/<type>/<sequences>/<kv_heads>/<head_dim>/1": one decoding step's append, a token
// of every head to each of `sequences` sequences of a kv_cache (int8 quantized on write), from
// float rows. Counters: us_per_row, the time per (sequence, head) row of keys and values, and
// gbytes_per_s counting the bytes stored. Timed per step by hand (UseManualTime), so that emptying
// the pool between runs of steps is not counted.
// "cache_decode/<type>/<B>/<Hq>/<Hkv>/<Skv>/<D>/<threads>": one decoding step (a query per head)
// over B sequences of Skv tokens read from the cache's pages; Skv "ragged" is 16 sequences of
// seeded lengths in [128, 4096]. Counters gflops and gbytes_per_s (the key and value bytes stored).
// "cache_key_mass/<type>/<B>/<Hq>/<Hkv>/<Skv>/<D>/<threads>": the same step by eval_with_key_mass,
// which also returns the attention each cached token received (eviction's input); counters as
// cache_decode's.
// "cache_select/<type>/<B>/<Hq>/<Hkv>/<Skv>/<D>/<k>/<threads>": top-k sparse attention, the decoding
// step of cache_decode over k of the Skv tokens (seeded, distinct, in position order) per key head,
// select(K, idx) and select(V, idx) reading them from the pages. Counter gbytes_per_s: the bytes of
// the selected rows.
// "cache_verify/<mask>/<type>/<B>/<Hq>/<Hkv>/<n>/<Skv>/<D>/<threads>": speculative decoding's
// verification, n queries (the draft's tokens, the newest n of Skv + n cached) with mask = tree (a
// binary tree of n tokens, tree_mask) or causal (causal(align::bottom_right), the chain of n tokens).
// Counter gbytes_per_s as cache_decode's.
// "decode_loop/<how>/<type>/<Hq>/<Hkv>/<steps>/<D>/1": a whole token-by-token loop of one sequence
// (append a token's keys and values, attend it), how = onnx (onnx::attention with past_key /
// past_value, its present outputs fed back), onnx_shared (the same with share_past_present_buffer:
// the new rows written into the past buffers in place), hand (a preallocated tensor, a row written per step,
// the unused tail masked by lengths) or cache (a kv_cache). Counter tokens_per_s.
#include "common.hpp"
#include "variants.hpp"

#include <xattn/cache.hpp>
#include <xattn/onnx/attention.hpp>
#include <xattn/xattn.hpp>
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace xattn_bench {

namespace {

/// Bytes a cache stores per token and head, of keys or values: the row, and a quantized format's scales.
template <class T>
constexpr std::size_t row_bytes(std::size_t dim, std::size_t page_size = 16) {
  constexpr std::size_t packs = xattn::features_per_code<xattn::cache_format<T>>;  // 4-bit codes: 2 per byte
  // a page's per-channel parameters (q4c) spread over its rows
  constexpr bool per_token = xattn::is_quantized_v<T> && !xattn::per_channel_v<T>;
  return (dim + packs - 1) / packs * sizeof(T) + (per_token ? (dim + 31) / 32 * sizeof(float) : 0) +
         (xattn::per_channel_v<T> ? 2 * dim * sizeof(float) / page_size : 0);
}

template <class T>
void cache_append(benchmark::State& state, std::size_t sequences, std::size_t heads, std::size_t dim) {
  constexpr std::size_t steps = 1024;  // tokens per sequence before the pool is emptied
  xattn::kv_cache<T> cache({.kv_heads = heads, .head_dim = dim, .page_size = 16, .max_tokens = sequences * steps});
  cache.reserve(sequences * steps);  // a server's pool, allocated up front: appends do not take its page faults
  xt::xtensor<float, 3> k = xt::xtensor<float, 3>::from_shape({heads, 1, dim}), v = k;
  fill_uniform({k.data(), k.size()}, 1);
  fill_uniform({v.data(), v.size()}, 2);
  std::vector<xattn::sequence_id> ids;
  const auto refill = [&] {
    for (const auto id : ids) cache.release(id);
    ids.clear();
    for (std::size_t s = 0; s < sequences; ++s) ids.push_back(cache.add_sequence());
  };
  refill();
  std::size_t step = 0;
  for (auto _ : state) {
    if (step++ == steps) refill(), step = 1;
    const auto start = std::chrono::steady_clock::now();
    for (const auto id : ids) cache.append(id, k, v);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double rows = double(state.iterations() * sequences * heads);
  // (rows / 1e6) per second, inverted: microseconds per row
  state.counters["us_per_row"] =
      benchmark::Counter(rows / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  const double stored = 2.0 * double(row_bytes<T>(dim));
  state.counters["gbytes_per_s"] = benchmark::Counter(rows * stored / 1e9, benchmark::Counter::kIsRate);
}

template <class T>
void register_append(const char* type) {
  const std::size_t sequences = 64, heads = 8, dim = 128;
  const std::string name = std::string("cache_append/") + type + "/" + std::to_string(sequences) + "/" +
                           std::to_string(heads) + "/" + std::to_string(dim) + "/1";
  benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { cache_append<T>(st, sequences, heads, dim); })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

struct decode_shape {
  std::size_t batch, q_heads, kv_heads, seq_kv, head_dim;  // seq_kv 0: ragged
};

/// The sequence lengths of a shape: all seq_kv, or the ragged batch's seeded lengths.
std::vector<std::size_t> lengths_of(const decode_shape& s) {
  if (s.seq_kv != 0) return std::vector<std::size_t>(s.batch, s.seq_kv);
  std::mt19937_64 gen(2026);
  std::uniform_int_distribution<std::size_t> len(128, 4096);
  std::vector<std::size_t> l(s.batch);
  for (auto& x : l) x = len(gen);
  return l;
}

template <class T, class V = T>
void cache_decode(benchmark::State& state, const decode_shape& s, int threads, bool key_mass = false) {
  set_threads(threads);
  const auto lens = lengths_of(s);
  std::size_t tokens = 0;
  for (auto l : lens) tokens += l;
  constexpr std::size_t ps = xattn::per_channel_v<T> ? 64 : 16;  // per-channel steps: over 64 tokens, as KIVI's
  xattn::kv_cache<T, V> cache({.kv_heads = s.kv_heads,
                               .head_dim = s.head_dim,
                               .page_size = ps,
                               .max_tokens = tokens + s.batch * ps});  // each sequence's last page partly used
  std::vector<xattn::sequence_id> batch;
  for (std::size_t b = 0; b < s.batch; ++b) {
    xt::xtensor<float, 3> k = xt::xtensor<float, 3>::from_shape({s.kv_heads, lens[b], s.head_dim}), v = k;
    fill_uniform({k.data(), k.size()}, 10 + b);
    fill_uniform({v.data(), v.size()}, 100 + b);
    batch.push_back(cache.add_sequence());
    cache.append(batch.back(), k, v);
  }
  xt::xtensor<float, 4> q = xt::xtensor<float, 4>::from_shape({s.batch, s.q_heads, 1, s.head_dim});
  fill_uniform({q.data(), q.size()}, 1);
  xt::xtensor<float, 4> o = xt::zeros<float>({s.batch, s.q_heads, std::size_t(1), s.head_dim});
  const auto e =
      softmax(xattn::ref(q) * trans(cache.keys(batch)) * (1.0f / std::sqrt(float(s.head_dim)))) * cache.values(batch);
  const xattn::schedule sch{.threads = threads};
  const double flop = 4.0 * double(s.q_heads * tokens * s.head_dim);
  xt::xtensor<float, 3> mass;
  const double seconds = run_timed(state, flop, [&] {
    if (!key_mass) return xattn::eval_into(e, o, sch);
    auto r = xattn::eval_with_key_mass(e, sch);
    o = std::move(r.output), mass = std::move(r.key_mass);
  });
  state.counters["gbytes_per_s"] =
      double(tokens * s.kv_heads * (row_bytes<T>(s.head_dim, ps) + row_bytes<V>(s.head_dim, ps))) / seconds / 1e9;
  const auto want = xattn::reference(e);  // double, on the values as stored
  double worst = 0;
  for (std::size_t i = 0; i < o.size(); ++i)
    worst = std::max(worst, std::abs(double(o.data()[i]) - want.output.data()[i]));
  for (std::size_t b = 0; key_mass && b < s.batch; ++b)  // each key's weights over the query heads of its key head
    for (std::size_t hk = 0; hk < s.kv_heads; ++hk)
      for (std::size_t j = 0; j < lens[b]; ++j) {
        double sum = 0;
        for (std::size_t h = hk * (s.q_heads / s.kv_heads); h < (hk + 1) * (s.q_heads / s.kv_heads); ++h)
          sum += want.weights(b, h, 0, j);
        worst = std::max(worst, std::abs(double(mass(b, hk, j)) - sum));
      }
  if (!(worst < 1e-5)) state.SkipWithError(("output differs from reference by " + std::to_string(worst)).c_str());
}

template <class T, class V = T>
void register_decode(const char* type, const decode_shape& s) {
  for (int threads : thread_counts) {
    std::string name = std::string("cache_decode/") + type;
    for (std::size_t x : {s.batch, s.q_heads, s.kv_heads}) name += '/' + std::to_string(x);
    name += s.seq_kv ? '/' + std::to_string(s.seq_kv) : std::string("/ragged");
    name += '/' + std::to_string(s.head_dim) + '/' + std::to_string(threads);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [s, threads](benchmark::State& st) { cache_decode<T, V>(st, s, threads); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

template <class T>
void register_key_mass(const char* type, const decode_shape& s) {
  for (int threads : thread_counts) {
    std::string name = std::string("cache_key_mass/") + type;
    for (std::size_t x : {s.batch, s.q_heads, s.kv_heads, s.seq_kv, s.head_dim}) name += '/' + std::to_string(x);
    name += '/' + std::to_string(threads);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [s, threads](benchmark::State& st) { cache_decode<T>(st, s, threads, true); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

template <class T, class V = T>
void register_decodes(const char* type) {
  register_decode<T, V>(type, {1, 32, 32, 4096, 128});  // multi-head: every head's keys read once
  register_decode<T, V>(type, {1, 32, 8, 8192, 128});   // grouped-query
  register_decode<T, V>(type, {16, 32, 8, 0, 128});     // a ragged batch
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, xattn::bfloat16> || std::is_same_v<T, std::int8_t>) {
    register_key_mass<T>(type, {1, 32, 32, 4096, 128});
    register_key_mass<T>(type, {1, 32, 8, 8192, 128});
  }
}

template <class T>
void cache_select(benchmark::State& state, const decode_shape& s, std::size_t k, int threads) {
  set_threads(threads);
  constexpr std::size_t ps = 16;
  xattn::kv_cache<T> cache(
      {.kv_heads = s.kv_heads, .head_dim = s.head_dim, .page_size = ps, .max_tokens = s.batch * (s.seq_kv + ps)});
  std::vector<xattn::sequence_id> batch;
  for (std::size_t b = 0; b < s.batch; ++b) {  // the rows cache_decode attends
    xt::xtensor<float, 3> kk = xt::xtensor<float, 3>::from_shape({s.kv_heads, s.seq_kv, s.head_dim}), v = kk;
    fill_uniform({kk.data(), kk.size()}, 10 + b);
    fill_uniform({v.data(), v.size()}, 100 + b);
    batch.push_back(cache.add_sequence());
    cache.append(batch.back(), kk, v);
  }
  xt::xtensor<std::int32_t, 4> idx = xt::xtensor<std::int32_t, 4>::from_shape({s.batch, s.kv_heads, 1, k});
  std::mt19937_64 gen(7);
  std::vector<std::int32_t> all(s.seq_kv);
  for (std::size_t bh = 0; bh < s.batch * s.kv_heads; ++bh) {
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), gen);
    std::sort(all.begin(), all.begin() + std::ptrdiff_t(k));
    std::copy(all.begin(), all.begin() + std::ptrdiff_t(k), idx.data() + bh * k);
  }
  xt::xtensor<float, 4> q = xt::xtensor<float, 4>::from_shape({s.batch, s.q_heads, 1, s.head_dim});
  fill_uniform({q.data(), q.size()}, 1);
  xt::xtensor<float, 4> o = xt::zeros<float>({s.batch, s.q_heads, std::size_t(1), s.head_dim});
  const auto K = cache.keys(batch), V = cache.values(batch);
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  const auto e = softmax(xattn::ref(q) * trans(select(K, idx)) * scale) * select(V, idx);
  const xattn::schedule sch{.threads = threads};
  const double flop = 4.0 * double(s.batch * s.q_heads * k * s.head_dim);
  const double seconds = run_timed(state, flop, [&] { xattn::eval_into(e, o, sch); });
  state.counters["gbytes_per_s"] = 2.0 * double(s.batch * k * s.kv_heads * row_bytes<T>(s.head_dim)) / seconds / 1e9;
  const auto want = xattn::reference(e).output;  // double, on the values as stored
  double worst = 0;
  for (std::size_t i = 0; i < o.size(); ++i) worst = std::max(worst, std::abs(double(o.data()[i]) - want.data()[i]));
  if (!(worst < 1e-5)) state.SkipWithError(("output differs from reference by " + std::to_string(worst)).c_str());
}

template <class T>
void register_select(const char* type) {
  const decode_shape s{1, 32, 8, 8192, 128};
  const std::size_t k = 512;
  for (int threads : thread_counts) {
    std::string name = std::string("cache_select/") + type;
    for (std::size_t x : {s.batch, s.q_heads, s.kv_heads, s.seq_kv, s.head_dim, k}) name += '/' + std::to_string(x);
    name += '/' + std::to_string(threads);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [s, k, threads](benchmark::State& st) { cache_select<T>(st, s, k, threads); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

/// A binary tree of n draft tokens in breadth-first order: token t's parent is (t - 1) / 2, the root's the prefix.
xt::xtensor<int, 1> binary_tree(std::size_t n) {
  xt::xtensor<int, 1> parents = xt::xtensor<int, 1>::from_shape({n});
  for (std::size_t t = 0; t < n; ++t) parents(t) = int(t) - 1 < 0 ? -1 : (int(t) - 1) / 2;
  return parents;
}

template <class T>
void cache_verify(benchmark::State& state, bool tree, const decode_shape& s, std::size_t n, int threads) {
  set_threads(threads);
  const std::size_t tokens = s.seq_kv + n;
  constexpr std::size_t ps = 16;
  xattn::kv_cache<T> cache(
      {.kv_heads = s.kv_heads, .head_dim = s.head_dim, .page_size = ps, .max_tokens = tokens + ps});
  xt::xtensor<float, 3> k = xt::xtensor<float, 3>::from_shape({s.kv_heads, tokens, s.head_dim}), v = k;
  fill_uniform({k.data(), k.size()}, 10);
  fill_uniform({v.data(), v.size()}, 100);
  const auto id = cache.add_sequence();
  cache.append(id, k, v);
  xt::xtensor<float, 4> q = xt::xtensor<float, 4>::from_shape({1, s.q_heads, n, s.head_dim});
  fill_uniform({q.data(), q.size()}, 1);
  xt::xtensor<float, 4> o = xt::zeros<float>({std::size_t(1), s.q_heads, n, s.head_dim});
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  const auto parents = binary_tree(n);
  const xattn::schedule sch{.threads = threads};
  const auto run = [&](const auto& e) {
    const double flop = 4.0 * double(s.q_heads * n * tokens * s.head_dim);
    const double seconds = run_timed(state, flop, [&] { xattn::eval_into(e, o, sch); });
    state.counters["gbytes_per_s"] = 2.0 * double(tokens * s.kv_heads * row_bytes<T>(s.head_dim)) / seconds / 1e9;
    const auto want = xattn::reference(e).output;
    double worst = 0;
    for (std::size_t i = 0; i < o.size(); ++i) worst = std::max(worst, std::abs(double(o.data()[i]) - want.data()[i]));
    // several queries on bfloat16 pages take vdpbf16ps, whose probabilities are rounded to bf16 (2^-9 of max|V|)
    const double tol = std::is_same_v<T, xattn::bfloat16> ? 2e-3 : 1e-5;
    if (!(worst < tol)) state.SkipWithError(("output differs from reference by " + std::to_string(worst)).c_str());
  };
  const auto K = cache.keys({id});
  const auto V = cache.values({id});
  if (tree)
    run(softmax(mask(xattn::ref(q) * trans(K) * scale, xattn::tree_mask(parents))) * V);
  else
    run(softmax(mask(xattn::ref(q) * trans(K) * scale, xattn::causal(xattn::align::bottom_right))) * V);
}

template <class T>
void register_verify(const char* type) {
  const decode_shape s{1, 32, 8, 4096, 128};
  const std::size_t n = 16;
  for (int threads : thread_counts)
    for (const bool tree : {true, false}) {
      std::string name = std::string("cache_verify/") + (tree ? "tree/" : "causal/") + type;
      for (std::size_t x : {s.batch, s.q_heads, s.kv_heads, n, s.seq_kv, s.head_dim}) name += '/' + std::to_string(x);
      name += '/' + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(),
                                   [=](benchmark::State& st) { cache_verify<T>(st, tree, s, n, threads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
}

enum class loop_kind { onnx, onnx_shared, hand, cache };

template <class T>
void decode_loop(benchmark::State& state, loop_kind how, std::size_t hq, std::size_t hkv, std::size_t steps,
                 std::size_t dim) {
  set_threads(1);
  const xattn::schedule sch{.threads = 1};
  const float scale = 1.0f / std::sqrt(float(dim));
  xt::xtensor<float, 4> qf = xt::xtensor<float, 4>::from_shape({1, hq, 1, dim});
  xt::xtensor<float, 3> kf = xt::xtensor<float, 3>::from_shape({hkv, steps, dim}), vf = kf;  // a token per step
  fill_uniform({qf.data(), qf.size()}, 1);
  fill_uniform({kf.data(), kf.size()}, 2);
  fill_uniform({vf.data(), vf.size()}, 3);
  const auto row = [&](const xt::xtensor<float, 3>& x, std::size_t t) {  // (1, Hkv, 1, D) of type T
    xt::xarray<T> r = xt::xarray<T>::from_shape({1, hkv, 1, dim});
    for (std::size_t h = 0; h < hkv; ++h)
      for (std::size_t d = 0; d < dim; ++d) r(0, h, 0, d) = T(x(h, t, d));
    return r;
  };
  std::vector<xt::xarray<T>> krows, vrows;
  for (std::size_t t = 0; t < steps; ++t) krows.push_back(row(kf, t)), vrows.push_back(row(vf, t));
  xt::xarray<T> q = xt::xarray<T>::from_shape({1, hq, 1, dim});
  std::transform(qf.begin(), qf.end(), q.begin(), [](float x) { return T(x); });
  xt::xtensor<float, 4> o = xt::zeros<float>({std::size_t(1), hq, std::size_t(1), dim});
  double checksum = 0;
  for (auto _ : state) {
    if (how == loop_kind::onnx) {
      xattn::onnx::attention_inputs<T> in;
      in.q = q;
      for (std::size_t t = 0; t < steps; ++t) {
        in.k = krows[t];
        in.v = vrows[t];
        auto out = xattn::onnx::attention(in, {}, true, false);
        in.past_key = std::move(out.present_key);
        in.past_value = std::move(out.present_value);
        checksum += double(out.y(0, 0, 0, 0));
      }
    } else if (how == loop_kind::onnx_shared) {
      xattn::onnx::attention_inputs<T> in;
      xattn::onnx::attention_attrs at;
      at.share_past_present_buffer = true;
      in.q = q;
      in.past_key = xt::xarray<T>(xt::zeros<T>({std::size_t(1), hkv, steps, dim}));
      in.past_value = in.past_key;
      in.past_seqlens = xt::xarray<std::int64_t>({std::int64_t(0)});
      for (std::size_t t = 0; t < steps; ++t) {
        in.k = krows[t];
        in.v = vrows[t];
        const auto out = xattn::onnx::attention(in, at, true, false);
        (*in.past_seqlens)(0) += 1;
        checksum += double(out.y(0, 0, 0, 0));
      }
    } else if (how == loop_kind::hand) {
      xt::xtensor<T, 4> kc = xt::zeros<T>({std::size_t(1), hkv, steps, dim}), vc = kc;
      xt::xtensor<std::int64_t, 1> len = {0};
      for (std::size_t t = 0; t < steps; ++t) {
        for (std::size_t h = 0; h < hkv; ++h) {
          std::copy_n(krows[t].data() + h * dim, dim, kc.data() + (h * steps + t) * dim);
          std::copy_n(vrows[t].data() + h * dim, dim, vc.data() + (h * steps + t) * dim);
        }
        len(0) = std::int64_t(t + 1);
        const auto step = softmax(mask(xattn::ref(q) * trans(xattn::ref(kc)) * scale,
                                       xattn::lengths(len, xattn::masked_rows::zero))) *
                          xattn::ref(vc);
        xattn::eval_into(step, o, sch);
        checksum += double(o(0, 0, 0, 0));
      }
    } else {
      xattn::kv_cache<T> cache({.kv_heads = hkv, .head_dim = dim, .page_size = 16, .max_tokens = steps});
      const auto s = cache.add_sequence();
      for (std::size_t t = 0; t < steps; ++t) {
        cache.append(s, xt::view(krows[t], 0), xt::view(vrows[t], 0));
        xattn::eval_into(softmax(xattn::ref(q) * trans(cache.keys({s})) * scale) * cache.values({s}), o, sch);
        checksum += double(o(0, 0, 0, 0));
      }
    }
  }
  benchmark::DoNotOptimize(checksum);
  state.counters["tokens_per_s"] = benchmark::Counter(double(state.iterations() * steps), benchmark::Counter::kIsRate);
}

template <class T>
void register_loops(const char* type) {
  const std::size_t hq = 8, hkv = 8, steps = 256, dim = 64;
  for (const auto& [how, name] : {std::pair{loop_kind::onnx, "onnx"}, std::pair{loop_kind::onnx_shared, "onnx_shared"},
                                  std::pair{loop_kind::hand, "hand"}, std::pair{loop_kind::cache, "cache"}}) {
    const std::string row = std::string("decode_loop/") + name + "/" + type + "/" + std::to_string(hq) + "/" +
                            std::to_string(hkv) + "/" + std::to_string(steps) + "/" + std::to_string(dim) + "/1";
    const loop_kind k = how;
    benchmark::RegisterBenchmark(row.c_str(), [=](benchmark::State& st) { decode_loop<T>(st, k, hq, hkv, steps, dim); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

void register_cache() {
  register_append<float>("float");
  register_append<xattn::bfloat16>("bfloat16");
  register_append<std::int8_t>("int8");
  register_decodes<float>("float");
  register_decodes<xattn::bfloat16>("bfloat16");
  register_decodes<std::int8_t>("int8");
  register_decodes<xattn::float8_e4m3>("fp8");
  register_decodes<xattn::q4>("q4");
  register_decodes<xattn::q4c, xattn::q4>("q4c");  // keys per channel (KIVI), values per token
  register_select<float>("float");
  register_select<xattn::bfloat16>("bfloat16");
  register_select<std::int8_t>("int8");
  register_verify<float>("float");
  register_verify<xattn::bfloat16>("bfloat16");
  register_verify<std::int8_t>("int8");
  register_loops<float>("float");
  register_loops<xattn::bfloat16>("bfloat16");
}

}  // namespace xattn_bench
