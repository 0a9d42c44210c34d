// xattn-numerics-probe: measured error of the fused float (and double) kernel against the
// double-precision reference, as a function of head size D, key count S and logit magnitude; and
// for 16-bit operands, the kernel's error and the inputs' rounding apart.
// Prints the tables of docs/numerics.md. Rows are independent, so the reference (O(rows·S·D)
// with an allocation per pair) is evaluated on a strided sample of query rows only.
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <xtensor/xview.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>

using namespace xattn;

namespace {

struct measured {
  double max_err, rms_err, max_score;
};

/// softmax(alpha · Q·Kᵀ/√D) · V over S keys, `rows` query rows; Q, K ~ U(-1, 1), V ~ U(v_lo, 1).
template <class T>
measured measure(std::size_t s, std::size_t d, double alpha, double v_lo, std::size_t rows, std::uint64_t seed) {
  testing::rng r(seed);
  const xt::xtensor<T, 3> q = r.tensor<T>({1, rows, d}), k = r.tensor<T>({1, s, d}),
                          v = r.tensor<T>({1, s, d}, v_lo, 1);
  auto Q = ref(q), K = ref(k), V = ref(v);
  const auto e = softmax(Q * trans(K) * (alpha / std::sqrt(double(d)))) * V;
  const xt::xtensor<T, 3> got = eval(e);
  const auto want = reference(e);
  measured m{0, 0, 0};
  for (double x : want.scores) m.max_score = std::max(m.max_score, std::abs(x));
  double sq = 0;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t c = 0; c < d; ++c) {
      const double err = std::abs(double(got(0, i, c)) - want.output(0, 0, i, c));
      m.max_err = std::max(m.max_err, err);
      sq += err * err;
    }
  m.rms_err = std::sqrt(sq / double(rows * d));
  return m;
}

template <class T>
void table(const char* title, std::initializer_list<std::size_t> ss, std::initializer_list<std::size_t> ds,
           std::initializer_list<double> alphas, double v_lo = -1) {
  const double eps = std::is_same_v<T, float> ? 0x1p-24 : 0x1p-53;
  std::printf("\n%s\n| S | D | max|s| | max err | max err / eps | rms err / eps |\n|---|---|---|---|---|---|\n", title);
  for (std::size_t s : ss)
    for (std::size_t d : ds)
      for (double a : alphas) {
        measured worst{0, 0, 0};
        for (std::uint64_t seed = 1; seed <= 3; ++seed) {  // worst of three draws
          const auto m = measure<T>(s, d, a, v_lo, 48, seed * 7919 + s + d);
          worst = {std::max(worst.max_err, m.max_err), std::max(worst.rms_err, m.rms_err),
                   std::max(worst.max_score, m.max_score)};
        }
        std::printf("| %zu | %zu | %.3g | %.3g | %.2f | %.2f |\n", s, d, worst.max_score, worst.max_err,
                    worst.max_err / eps, worst.rms_err / eps);
        std::fflush(stdout);
      }
}

/// 16-bit Q, K, V (rounded from float draws): the kernel's error against the reference on the same
/// 16-bit values, and the total against the reference on the float values before rounding, also as
/// the smallest tolerance t with |out - ref| <= t + t·|ref| (PyTorch's bf16 SDPA test uses 5e-2).
template <class E>
void table16(const char* title, std::initializer_list<std::size_t> ss, std::initializer_list<std::size_t> ds,
             std::initializer_list<double> alphas) {
  std::printf(
      "\n%s\n| S | D | max|s| | kernel err (same 16-bit inputs) | / 2^-24 | err vs float inputs | "
      "atol = rtol needed |\n|---|---|---|---|---|---|---|\n",
      title);
  for (std::size_t s : ss)
    for (std::size_t d : ds)
      for (double a : alphas) {
        double kernel = 0, total = 0, tol = 0, max_s = 0;
        for (std::uint64_t seed = 1; seed <= 3; ++seed) {
          testing::rng r(seed * 7919 + s + d);
          const std::size_t rows = 48;
          const xt::xtensor<float, 3> q = r.tensor<float>({1, rows, d}), k = r.tensor<float>({1, s, d}),
                                      v = r.tensor<float>({1, s, d});
          const xt::xtensor<E, 3> q16 = xt::cast<E>(q), k16 = xt::cast<E>(k), v16 = xt::cast<E>(v);
          const double scale = a / std::sqrt(double(d));
          auto Q = ref(q16), K = ref(k16), V = ref(v16);
          auto Qf = ref(q), Kf = ref(k), Vf = ref(v);
          const auto e = softmax(Q * trans(K) * scale) * V;
          const xt::xtensor<float, 3> got = eval(e);
          const auto same = reference(e), exact = reference(softmax(Qf * trans(Kf) * scale) * Vf);
          for (double x : same.scores) max_s = std::max(max_s, std::abs(x));
          for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t c = 0; c < d; ++c) {
              const double g = got(0, i, c), w16 = same.output(0, 0, i, c), w = exact.output(0, 0, i, c);
              kernel = std::max(kernel, std::abs(g - w16));
              total = std::max(total, std::abs(g - w));
              tol = std::max(tol, std::abs(g - w) / (1 + std::abs(w)));
            }
        }
        std::printf("| %zu | %zu | %.3g | %.3g | %.2f | %.3g | %.3g |\n", s, d, max_s, kernel, kernel / 0x1p-24, total,
                    tol);
        std::fflush(stdout);
      }
}

}  // namespace

int main() {
  const auto t0 = std::chrono::steady_clock::now();
  table<float>("float, error vs D (S = 1024), V ~ U(-1, 1)", {1024}, {1, 16, 64, 256, 1024}, {1, 10});
  table<float>("float, error vs S (D = 16), V ~ U(-1, 1)", {64, 1024, 16384, 65536}, {16}, {1, 10});
  table<float>("float, error vs S (D = 16), V ~ U(0, 1): same-sign sums", {64, 1024, 16384, 65536}, {16}, {1, 10}, 0.0);
  table<float>("float, error vs logit magnitude (S = 1024, D = 64)", {1024}, {64},
               {1, 3, 10, 30, 100, 300, 1000, 10000});
  table<double>("double, error vs D and S", {1024, 65536}, {16, 1024}, {1, 10});
  table16<bfloat16>("bfloat16 operands (float accumulation), Q, K, V ~ U(-1, 1)", {1024, 16384}, {64, 128}, {1, 10});
  table16<float16>("float16 operands (float accumulation), Q, K, V ~ U(-1, 1)", {1024, 16384}, {64, 128}, {1, 10});
  std::printf("\n(%.1f s)\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}
