// Registration hook: each variant file defines one register_* function, main.cpp calls them all.
// A variant over the attention shape table registers itself with register_attention_variant.
#pragma once

#include "common.hpp"

#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace xattn_bench {

// Body of one benchmark: set up, run_timed(...), then check_against_reference(...).
using attention_body = std::function<void(benchmark::State&, const attention_shape&, int threads)>;
using shape_filter = std::function<bool(const attention_shape&)>;

// Registers `variant` for every shape in `shapes` (attention_shapes unless given) that `include`
// accepts, × thread_counts.
inline void register_attention_variant(std::string_view variant, attention_body body, shape_filter include = {},
                                       std::span<const attention_shape> shapes = attention_shapes) {
  for (const attention_shape& s : shapes) {
    if (include && !include(s)) continue;
    for (int threads : thread_counts) {
      benchmark::RegisterBenchmark(bench_name(variant, s, threads).c_str(),
                                   [body, s, threads](benchmark::State& state) { body(state, s, threads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

// Registers "<name>/<threads>" for every thread count: the machine ceilings (peak_fma, bandwidth/read).
inline void register_per_thread_count(std::string_view name, void (*body)(benchmark::State&, int threads)) {
  for (int threads : thread_counts)
    benchmark::RegisterBenchmark((std::string(name) + "/" + std::to_string(threads)).c_str(),
                                 [body, threads](benchmark::State& state) { body(state, threads); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}

void register_peak_fma();
void register_cache();
void register_c_api();
void register_peak_bf16();
void register_sixteen_bit();
void register_peak_read();
void register_blas_unfused();
void register_xtensor_eager();
void register_xattn_variant();
void register_additive();
void register_user_policies();
void register_memory();
void register_tile_ops();
void register_backward();
void register_mla();
void register_documents();

}  // namespace xattn_bench
