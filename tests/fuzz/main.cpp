// xattn-fuzz: random attention pipelines, fused eval() against the double reference.
//   xattn-fuzz --cases N [--seed S]          run cases 0..N-1 of seed S (random seed if omitted);
//                                            the first combination_count() cases run every pipeline once
//   xattn-fuzz --seed S --case K --only      replay case K alone (what a failure prints)
// Exit status 0 when every case passes, 1 otherwise.
#include "run_case.hpp"

#include <CLI/CLI.hpp>

#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

namespace {

// The reproducer of the running case, kept preformatted so that a crash handler can print it
// with async-signal-safe calls only.
char current_repro[256] = "";

extern "C" void on_crash(int sig) {
  const char head[] = "\nxattn-fuzz: crashed while running case; reproduce with: ";
  [[maybe_unused]] auto n = ::write(2, head, sizeof head - 1);
  n = ::write(2, current_repro, std::strlen(current_repro));
  n = ::write(2, "\n", 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::string reproducer(std::uint64_t seed, std::uint64_t index) {
  return "xattn-fuzz --seed " + std::to_string(seed) + " --case " + std::to_string(index) + " --only";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Differential fuzzer: fused eval() against the double-precision reference"};
  std::uint64_t cases = 500, first = 0, seed = std::random_device{}();
  bool only = false, verbose = false;
  app.add_option("--cases", cases, "number of cases to run");
  app.add_option("--seed", seed, "run seed (random when omitted; always printed)");
  app.add_option("--case", first, "index of the first case");
  app.add_flag("--only", only, "run only the case given by --case");
  app.add_flag("-v,--verbose", verbose, "print every case");
  CLI11_PARSE(app, argc, argv);
  if (only) cases = 1;

  std::cout << "xattn-fuzz: seed " << seed << ", cases " << first << ".." << first + cases - 1 << "; cases 0.."
            << xattn::fuzz::combination_count() - 1 << " run every pipeline once" << std::endl;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_crash);

  std::uint64_t passed = 0, failed = 0;
  for (std::uint64_t k = first; k < first + cases; ++k) {
    const std::string repro = reproducer(seed, k);
    std::snprintf(current_repro, sizeof current_repro, "%s", repro.c_str());
    xattn::testing::rng r(xattn::fuzz::case_seed(seed, k));
    const auto c = xattn::fuzz::draw_case(r, seed, k);
    if (verbose || only) std::cout << "case " << k << ": " << describe(c) << std::endl;
    const auto v = xattn::fuzz::run_case(c, r);
    if (v.ok) {
      ++passed;
      continue;
    }
    ++failed;
    std::cout << "FAIL case " << k << ": " << describe(c) << "\n  " << v.detail << "\n  reproduce: " << repro
              << std::endl;
  }
  std::cout << passed << " passed, " << failed << " failed" << std::endl;
  return failed == 0 ? 0 : 1;
}
