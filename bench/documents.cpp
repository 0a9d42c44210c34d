// Packed variable-length sequences: 8 documents of 512 tokens in one S = 4096 sequence, under
// documents(ids), against dense attention over the same S = 4096 (the time the packing saves: the
// 8 diagonal blocks are 1/8 of the pairs). Names: documents/<form>/<docs>x<len>/<B>/<H>/<S>/<D>/<threads>
// with form packed or dense; counters ms and gflops (of the pairs each form must compute).
#include "common.hpp"
#include "variants.hpp"

#include <xattn/xattn.hpp>
#include <xtensor/xadapt.hpp>

#include <cmath>
#include <string>

namespace xattn_bench {

namespace {

constexpr int docs = 8, len = 512, seq = docs * len, heads = 8, dim = 64;

void run(benchmark::State& state, bool packed, int threads) {
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
  const double pairs = packed ? double(docs) * len * len : double(seq) * seq;
  const double flop = 4.0 * heads * pairs * dim;
  const double seconds =
      packed
          ? run_timed(state, flop,
                      [&] { xattn::eval_into(softmax(mask(Q * trans(K) * scale, xattn::documents(ids))) * V, o, sch); })
          : run_timed(state, flop, [&] { xattn::eval_into(softmax(Q * trans(K) * scale) * V, o, sch); });
  state.counters["ms"] = seconds * 1e3;
}

}  // namespace

void register_documents() {
  for (int threads : thread_counts)
    for (bool packed : {true, false}) {
      const std::string name = std::string("documents/") + (packed ? "packed/" : "dense/") + std::to_string(docs) +
                               "x" + std::to_string(len) + "/1/" + std::to_string(heads) + "/" + std::to_string(seq) +
                               "/" + std::to_string(dim) + "/" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), [packed, threads](benchmark::State& st) { run(st, packed, threads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
}

}  // namespace xattn_bench
