// Each tile operation of the fused kernel alone, on the default tile (60 queries x 256 keys,
// D = Dv = 64 and 128), data in L1/L2 as in the fused pass: says where a fused pass's time goes.
// Names: tile/<op>/60/256/<D>; counter ns_per_tile (and gflops for the two products).
#include "common.hpp"
#include "variants.hpp"

#include <xattn/eval/operands/key_panels.hpp>
#include <xattn/kernel/tile_ops.hpp>

#include <vector>

namespace xattn_bench {

namespace {

constexpr std::size_t rows = 60, keys = 256;
constexpr std::size_t ld = xattn::tile_stride<float>(keys);  // the fused pass's padded score row stride

template <std::size_t dim>
struct tile_data {
  std::vector<float> q = std::vector<float>(rows * dim),
                     kt = std::vector<float>(xattn::kernel::packed_kt_size<float>(keys, dim)),
                     s = std::vector<float>(rows * ld), v = std::vector<float>(keys * dim),
                     o = std::vector<float>(rows * dim, 0.0f);
  tile_data() {
    fill_uniform(std::span<float>(q), 1);
    fill_uniform(std::span<float>(kt), 2);
    fill_uniform(std::span<float>(s), 3);
    fill_uniform(std::span<float>(v), 4);
  }
};

void report(benchmark::State& state, double seconds, double flop) {
  state.counters["ns_per_tile"] = 1e9 * seconds;
  if (flop > 0) state.counters["gflops"] = flop / seconds / 1e9;
}

template <std::size_t dim>
void register_tile_ops_for() {
  static tile_data<dim> t;
  const std::string shape = "/60/256/" + std::to_string(dim);
  benchmark::RegisterBenchmark(("tile/qk" + shape).c_str(), [](benchmark::State& state) {
    set_threads(1);
    const double s = run_timed(
        state, 0, [] { xattn::kernel::qk_tile(t.q.data(), dim, rows, t.kt.data(), dim, keys, t.s.data(), ld); });
    report(state, s, 2.0 * rows * keys * dim);
  })->UseRealTime();
  benchmark::RegisterBenchmark(("tile/pv" + shape).c_str(), [](benchmark::State& state) {
    set_threads(1);
    const double s = run_timed(
        state, 0, [] { xattn::kernel::pv_tile(t.s.data(), ld, rows, t.v.data(), dim, keys, t.o.data(), dim, dim); });
    report(state, s, 2.0 * rows * keys * dim);
  })->UseRealTime();
  benchmark::RegisterBenchmark(("tile/online_softmax" + shape).c_str(), [](benchmark::State& state) {
    set_threads(1);
    std::vector<xattn::kernel::row_state<float>> st(rows);
    const double s = run_timed(state, 0, [&] {
      for (std::size_t r = 0; r < rows; ++r) {
        st[r] = {};  // fresh state: the max grows once, as in a first key block
        xattn::kernel::online_softmax_row(t.s.data() + r * ld, keys, st[r], t.o.data() + r * dim, dim);
      }
    });
    report(state, s, 0);
  })->UseRealTime();
}

}  // namespace

void register_tile_ops() {
  register_tile_ops_for<64>();
  register_tile_ops_for<128>();
}

}  // namespace xattn_bench
