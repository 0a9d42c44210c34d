// Benchmark driver: registers every variant (peak first, as the reference), then runs Google Benchmark.
#include "variants.hpp"

#include <cblas.h>
#include <xsimd/xsimd.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace {

// The CPU's name, family, model and stepping from /proc/cpuinfo (first processor), for report.py's summary:
// Google Benchmark's context has the caches and the clock but not which CPU it ran on.
void add_cpu_context() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line) && !line.empty()) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const auto start = line.find_first_not_of(' ', colon + 1);
    const std::string value = start == std::string::npos ? "" : line.substr(start);
    if (key == "vendor_id") benchmark::AddCustomContext("cpu_vendor", value);
    if (key == "cpu family") benchmark::AddCustomContext("cpu_family", value);
    if (key == "model") benchmark::AddCustomContext("cpu_model_number", value);
    if (key == "stepping") benchmark::AddCustomContext("cpu_stepping", value);
    if (key == "model name") benchmark::AddCustomContext("cpu_model", value);
  }
  benchmark::AddCustomContext("avx512bf16", __builtin_cpu_supports("avx512bf16") ? "yes" : "no");
}

// Recorded in the JSON "context" so results.json says how it was produced.
void add_context() {
  add_cpu_context();
  char const* policy = std::getenv("OMP_WAIT_POLICY");
  benchmark::AddCustomContext("omp_wait_policy", policy ? policy : "unset");
  benchmark::AddCustomContext("xsimd_arch", xsimd::default_arch::name());
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());  // the baselines' kernels
  benchmark::AddCustomContext("xsimd_float_lanes", std::to_string(xsimd::batch<float>::size));
#ifdef NDEBUG
  benchmark::AddCustomContext("assertions", "off");
#else
  benchmark::AddCustomContext("assertions", "ON (not a release build: numbers are not meaningful)");
#endif
  if (policy == nullptr || std::string(policy) != "passive")
    std::fprintf(stderr,
                 "note: OMP_WAIT_POLICY is not 'passive'; spinning OpenMP workers slow OpenBLAS "
                 "(bench/run.sh sets it)\n");
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  add_context();
  xattn_bench::register_memory();  // first: later baselines raise the resident high-water mark
  xattn_bench::register_peak_fma();
  xattn_bench::register_peak_bf16();
  xattn_bench::register_peak_read();
  xattn_bench::register_blas_unfused();
  xattn_bench::register_xtensor_eager();
  xattn_bench::register_xattn_variant();
  xattn_bench::register_sixteen_bit();
  xattn_bench::register_additive();
  xattn_bench::register_user_policies();
  xattn_bench::register_documents();
  xattn_bench::register_tile_ops();
  xattn_bench::register_backward();
  xattn_bench::register_mla();
  xattn_bench::register_cache();
#if defined(XATTN_BENCH_C_API)
  xattn_bench::register_c_api();
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
