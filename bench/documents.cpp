// Packed variable-length sequences: 8 documents of 512 tokens in one S = 4096 sequence, under
// documents(ids), against dense attention over the same S = 4096 (the 8 diagonal blocks are 1/8 of
// the pairs). Name: documents/<docs>x<len>/<B>/<H>/<S>/<D>/<threads>; counters packed_ms, dense_ms,
// packed_over_dense (the target: at most 1/6) and gflops (of the packed pairs).
#include "common.hpp"
#include "variants.hpp"

#include <xattn/xattn.hpp>
#include <xtensor/xadapt.hpp>

#include <chrono>
#include <cmath>
#include <string>

namespace xattn_bench {

namespace {

constexpr int docs = 8, len = 512, seq = docs * len, heads = 8, dim = 64;

void run(benchmark::State& state, int threads) {
  set_threads(threads);
  const attention_shape s{1, heads, seq, seq, dim, false};
  attention_data data(s);
  const std::array<std::size_t, 4> shape{1, heads, seq, dim};
  auto adapt = [&](aligned_buffer& b) { return xt::adapt(b.data(), b.size(), xt::no_ownership(), shape); };
  auto q = adapt(data.q), k = adapt(data.k), v = adapt(data.v), o = adapt(data.o);
  auto Q = xattn::ref(q), K = xattn::ref(k), V = xattn::ref(v);
  xt::xtensor<int, 1> ids = xt::xtensor<int, 1>::from_shape({std::size_t(seq)});
  for (int i = 0; i < seq; ++i) ids(i) = i / len;
  const float scale = 1.0f / std::sqrt(float(dim));
  const xattn::schedule sch{.threads = threads};
  // The two forms alternate inside one timed loop, so that both see the same state of the
  // shared machine (its clock and its neighbours drift over seconds): the ratio is what counts.
  using clock = std::chrono::steady_clock;
  double packed_s = 0, dense_s = 0;
  for (auto _ : state) {
    auto t0 = clock::now();
    xattn::eval_into(softmax(mask(Q * trans(K) * scale, xattn::documents(ids))) * V, o, sch);
    auto t1 = clock::now();
    xattn::eval_into(softmax(Q * trans(K) * scale) * V, o, sch);
    auto t2 = clock::now();
    benchmark::ClobberMemory();
    packed_s += std::chrono::duration<double>(t1 - t0).count();
    dense_s += std::chrono::duration<double>(t2 - t1).count();
  }
  const double n = double(std::max<benchmark::IterationCount>(state.iterations(), 1));
  state.counters["packed_ms"] = packed_s / n * 1e3;
  state.counters["dense_ms"] = dense_s / n * 1e3;
  state.counters["packed_over_dense"] = dense_s > 0 ? packed_s / dense_s : 0;
  state.counters["gflops"] = 4.0 * heads * double(docs) * len * len * dim / (packed_s / n) / 1e9;  // packed pairs only
}

}  // namespace

void register_documents() {
  for (int threads : thread_counts) {
    const std::string name = "documents/" + std::to_string(docs) + "x" + std::to_string(len) + "/1/" +
                             std::to_string(heads) + "/" + std::to_string(seq) + "/" + std::to_string(dim) + "/" +
                             std::to_string(threads);
    benchmark::RegisterBenchmark(name.c_str(), [threads](benchmark::State& st) { run(st, threads); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace xattn_bench
