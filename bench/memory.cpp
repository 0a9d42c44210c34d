// Peak extra memory of the fused pass at S = 32768 (one head, D = 64): the growth of the process's
// resident high-water mark across one evaluation, after inputs and output are allocated and
// touched. Registered first, before baselines that materialise scores raise the mark.
#include "common.hpp"
#include "variants.hpp"

#include <xattn/xattn.hpp>
#include <xtensor/xadapt.hpp>

#include <sys/resource.h>

namespace xattn_bench {

namespace {

double max_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

}  // namespace

void register_memory() {
  benchmark::RegisterBenchmark(
      "memory/xattn/1/1/32768/32768/64/0/1",
      [](benchmark::State& state) {
        set_threads(1);
        const attention_shape s{1, 1, 32768, 32768, 64, false};
        attention_data data(s);  // inputs filled, output touched below
        std::fill(data.o.span().begin(), data.o.span().end(), 0.0f);
        const std::array<std::size_t, 4> shape{1, 1, 32768, 64};
        auto q = xt::adapt(data.q.span().data(), data.q.span().size(), xt::no_ownership(), shape);
        auto k = xt::adapt(data.k.span().data(), data.k.span().size(), xt::no_ownership(), shape);
        auto v = xt::adapt(data.v.span().data(), data.v.span().size(), xt::no_ownership(), shape);
        auto o = xt::adapt(data.o.span().data(), data.o.span().size(), xt::no_ownership(), shape);
        auto Q = xattn::ref(q), K = xattn::ref(k), V = xattn::ref(v);
        const double before = max_rss_mib();
        run_timed(state, attention_flop(s),
                  [&] { xattn::eval_into(softmax(Q * trans(K) * 0.125f) * V, o, {.threads = 1}); });
        state.counters["extra_mib"] = max_rss_mib() - before;
        state.counters["inputs_mib"] = 4.0 * 32768 * 64 * 4 / (1 << 20);
      })
      ->Iterations(1)
      ->Repetitions(1)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  // The backward at the same size: growth of the high-water mark across grad(), the three
  // gradients (24 MiB) included and also reported alone; f and d_out exist before.
  benchmark::RegisterBenchmark(
      "memory/xattn_bwd/1/1/32768/32768/64/0/1",
      [](benchmark::State& state) {
        set_threads(1);
        const attention_shape s{1, 1, 32768, 32768, 64, false};
        attention_data data(s);
        aligned_buffer d_out(elements_q(s));
        fill_uniform(d_out.span(), 4);
        const std::array<std::size_t, 4> shape{1, 1, 32768, 64};
        auto q = xt::adapt(data.q.span().data(), data.q.span().size(), xt::no_ownership(), shape);
        auto k = xt::adapt(data.k.span().data(), data.k.span().size(), xt::no_ownership(), shape);
        auto v = xt::adapt(data.v.span().data(), data.v.span().size(), xt::no_ownership(), shape);
        auto dout = xt::adapt(d_out.span().data(), d_out.span().size(), xt::no_ownership(), shape);
        const auto e = softmax(xattn::ref(q) * trans(xattn::ref(k)) * 0.125f) * xattn::ref(v);
        const auto f = xattn::eval_with_lse(e, {.threads = 1});
        const double before = max_rss_mib();
        run_timed(state, attention_flop(s) * 2.5, [&] {
          auto g = xattn::grad(e, f, dout, {.threads = 1});
          benchmark::DoNotOptimize(g.dq.data());
        });
        state.counters["extra_mib"] = max_rss_mib() - before;
        state.counters["gradients_mib"] = 3.0 * 32768 * 64 * 4 / (1 << 20);
      })
      ->Iterations(1)
      ->Repetitions(1)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace xattn_bench
