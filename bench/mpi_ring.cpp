// xattn-mpi-bench: context parallelism over MPI, causal forward, (1, H, S, D) with S = 32768 by
// default. Run once without mpirun (one process: the baselines with 1 and 2 threads) and once
// under `mpirun -np 2` (the ring, 1 thread per rank: zigzag, contiguous, and zigzag without
// messages); bench/run.sh does both. Every rank runs the same fixed iterations; the time of an
// iteration is the slowest rank's (manual time), and only rank 0 reports.
//   xattn_ring/<S>/<H>/<D>/<causal>/<layout>/<ranks>/<threads>   layout: single, zigzag, contiguous
//   xattn_ring_nocomm/...: the same computation with comm_mode::none (no messages)
// Counters: gflops (4·H·S²·D, half for causal), compute_imbalance (slowest rank's kernel wall time
// over the fastest's, minus 1), compute_cpu_imbalance (the same in process CPU time), compute_s
// (per rank: max), gbytes_sent (per rank: max).
#include <benchmark/benchmark.h>
#include <mpi.h>
#include <omp.h>
#include <xattn/mpi.hpp>

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr std::size_t heads = 8, dim = 64;

std::size_t seq_len() {
  const char* s = std::getenv("XATTN_RING_SEQ");
  return s ? std::size_t(std::stoul(s)) : 32768;
}

xt::xtensor<float, 4> random_rows(std::size_t rows, std::uint64_t seed) {
  xt::xtensor<float, 4> x = xt::xtensor<float, 4>::from_shape({1, heads, rows, dim});
  std::mt19937 g{unsigned(seed)};
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : x) v = u(g);
  return x;
}

double max_over_ranks(double x) {
  double m = 0;
  MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}
double min_over_ranks(double x) {
  double m = 0;
  MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  return m;
}

double causal_flop(std::size_t s) { return 4.0 * double(heads) * double(s) * double(s) * double(dim) / 2; }

/// The whole sequence in one process: eval_with_lse with `threads` threads.
void single(benchmark::State& state, int threads) {
  const std::size_t s = seq_len();
  const auto q = random_rows(s, 1), k = random_rows(s, 2), v = random_rows(s, 3);
  const xattn::schedule sch{.threads = threads};
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto f = xattn::eval_with_lse(
        softmax(mask(xattn::ref(q) * trans(xattn::ref(k)) / 8.0f, xattn::causal())) * xattn::ref(v), sch);
    benchmark::DoNotOptimize(f.output.data());
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["gflops"] =
      benchmark::Counter(causal_flop(s) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

/// The ring over MPI_COMM_WORLD, 1 thread per rank.
void ring(benchmark::State& state, xattn::mpi::balance how, xattn::mpi::comm_mode mode) {
  const std::size_t s = seq_len();
  xattn::mpi::context cp(MPI_COMM_WORLD, s, how);
  cp.set_comm_mode(mode);
  const std::size_t n = cp.local_rows().size();
  const auto q = random_rows(n, 1 + 10 * cp.rank()), k = random_rows(n, 2 + 10 * cp.rank()),
             v = random_rows(n, 3 + 10 * cp.rank());
  const xattn::schedule sch{.threads = 1};
  double compute = 0, imbalance = 0, cpu_imbalance = 0, sent = 0;
  for (auto _ : state) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    auto f = cp.eval_with_lse(
        softmax(mask(xattn::ref(q) * trans(xattn::ref(k)) / 8.0f, xattn::causal())) * xattn::ref(v), sch);
    benchmark::DoNotOptimize(f.output.data());
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(max_over_ranks(t));
    const double c = cp.last_stats().compute_seconds;
    compute = std::max(compute, max_over_ranks(c));
    imbalance = std::max(imbalance, max_over_ranks(c) / min_over_ranks(c) - 1);
    const double cpu = cp.last_stats().compute_cpu_seconds;
    cpu_imbalance = std::max(cpu_imbalance, max_over_ranks(cpu) / min_over_ranks(cpu) - 1);
    sent = std::max(sent, max_over_ranks(double(cp.last_stats().bytes_sent)));
  }
  state.counters["gflops"] =
      benchmark::Counter(causal_flop(s) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.counters["compute_imbalance"] = imbalance;
  state.counters["compute_cpu_imbalance"] = cpu_imbalance;
  state.counters["compute_s"] = compute;
  state.counters["gbytes_sent"] = sent / 1e9;
}

std::string name(const char* variant, const char* layout, int ranks, int threads) {
  return std::string(variant) + "/" + std::to_string(seq_len()) + "/" + std::to_string(heads) + "/" +
         std::to_string(dim) + "/1/" + layout + "/" + std::to_string(ranks) + "/" + std::to_string(threads);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0, rank = 0, ranks = 1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  using xattn::mpi::balance, xattn::mpi::comm_mode;
  auto fixed = [](benchmark::internal::Benchmark* b) {
    b->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
  };
  if (ranks == 1) {
    for (int t : {1, 2}) fixed(benchmark::RegisterBenchmark(name("xattn_ring", "single", 1, t).c_str(), single, t));
  } else {
    fixed(benchmark::RegisterBenchmark(name("xattn_ring", "zigzag", ranks, 1).c_str(), ring, balance::zigzag,
                                       comm_mode::ring));
    fixed(benchmark::RegisterBenchmark(name("xattn_ring", "contiguous", ranks, 1).c_str(), ring, balance::contiguous,
                                       comm_mode::ring));
    fixed(benchmark::RegisterBenchmark(name("xattn_ring_nocomm", "zigzag", ranks, 1).c_str(), ring, balance::zigzag,
                                       comm_mode::none));
  }
  // Only rank 0 writes: the others run the same benchmarks (they take part in every ring) silently.
  std::vector<char*> args(argv, argv + argc);
  if (rank != 0)
    args.erase(std::remove_if(args.begin() + 1, args.end(),
                              [](const char* a) { return std::string(a).rfind("--benchmark_out", 0) == 0; }),
               args.end());
  int n = int(args.size());
  benchmark::Initialize(&n, args.data());
  struct silent : benchmark::BenchmarkReporter {
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>&) override {}
  } quiet;
  if (rank == 0)
    benchmark::RunSpecifiedBenchmarks();
  else
    benchmark::RunSpecifiedBenchmarks(&quiet);
  benchmark::Shutdown();
  MPI_Finalize();
}
