// Additive attention: the fused pass (projections once, w_v·tanh(.) per pair inside the loop) against
// d2l's materialised form, written with xtensor as d2l writes it: features = tanh(q[:, :, None] +
// k[:, None, :]) of shape (B, Sq, Skv, h), scores = features · w_v, masked softmax, bmm.
// Names: additive/<form>/<B>/<Sq>/<Skv>/<d>/<h>/<threads>; counters: ms and scratch_mib, the
// memory each form allocates beyond inputs and output. Form fused_fwd_bwd is training: the forward
// with log-sum-exp, then grad() (input and parameter gradients); bench/torch_d2l.py adds
// torch_d2l_fwd_bwd, PyTorch 1.13 running d2l's AdditiveAttention forward and autograd backward.
#include "common.hpp"
#include "variants.hpp"

#include <xattn/xattn.hpp>
#include <xtensor-blas/xlinalg.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xview.hpp>

#include <string>

namespace xattn_bench {

namespace {

struct additive_case {
  std::size_t B = 2, Sq = 256, Skv = 256, d = 64, h = 64;
  xt::xtensor<float, 3> q, k, v;
  xt::xtensor<float, 2> w_q, w_k;
  xt::xtensor<float, 1> w_v;
  xt::xtensor<int, 1> lens;
  additive_case() {
    xt::random::seed(3);
    q = xt::random::rand<float>({B, Sq, d}, -1, 1);
    k = xt::random::rand<float>({B, Skv, d}, -1, 1);
    v = xt::random::rand<float>({B, Skv, d}, -1, 1);
    w_q = xt::random::rand<float>({h, d}, -0.2f, 0.2f);
    w_k = xt::random::rand<float>({h, d}, -0.2f, 0.2f);
    w_v = xt::random::rand<float>({h}, -1, 1);
    lens = {int(Skv), int(Skv / 2)};
  }
  std::string name(const char* form, int threads) const {
    return std::string("additive/") + form + "/" + std::to_string(B) + "/" + std::to_string(Sq) + "/" +
           std::to_string(Skv) + "/" + std::to_string(d) + "/" + std::to_string(h) + "/" + std::to_string(threads);
  }
};

xt::xtensor<float, 3> d2l_materialised(const additive_case& c) {
  xt::xtensor<float, 3> out = xt::zeros<float>({c.B, c.Sq, c.d});
  for (std::size_t b = 0; b < c.B; ++b) {
    const xt::xtensor<float, 2> qp = xt::linalg::dot(xt::view(c.q, b), xt::transpose(c.w_q));  // (Sq, h)
    const xt::xtensor<float, 2> kp = xt::linalg::dot(xt::view(c.k, b), xt::transpose(c.w_k));  // (Skv, h)
    const xt::xtensor<float, 3> features =
        xt::tanh(xt::view(qp, xt::all(), xt::newaxis(), xt::all()) + xt::view(kp, xt::newaxis(), xt::all(), xt::all()));
    xt::xtensor<float, 2> scores = xt::linalg::tensordot(features, c.w_v, 1);  // (Sq, Skv)
    xt::view(scores, xt::all(), xt::range(c.lens(b), c.Skv)) = -1e6f;
    const xt::xtensor<float, 2> e = xt::exp(scores - xt::view(xt::amax(scores, {1}), xt::all(), xt::newaxis()));
    const xt::xtensor<float, 2> w = e / xt::view(xt::sum(e, {1}), xt::all(), xt::newaxis());
    xt::view(out, b) = xt::linalg::dot(w, xt::view(c.v, b));
  }
  return out;
}

void set_ms(benchmark::State& state, double seconds_per_iteration, double scratch_mib) {
  state.counters["ms"] = 1e3 * seconds_per_iteration;
  state.counters["scratch_mib"] = scratch_mib;
}

}  // namespace

void register_additive() {
  static const additive_case c;
  constexpr double mib = 1.0 / (1 << 20);
  for (int threads : thread_counts) {
    benchmark::RegisterBenchmark(
        c.name("fused", threads).c_str(),
        [threads](benchmark::State& state) {
          set_threads(threads);
          auto Q = xattn::ref(c.q), K = xattn::ref(c.k), V = xattn::ref(c.v);
          const auto e = softmax(mask(score(xattn::additive{c.w_q, c.w_k, c.w_v}, Q, K), xattn::lengths(c.lens))) * V;
          const double s = run_timed(state, 0, [&] { benchmark::DoNotOptimize(xattn::eval(e, {.threads = threads})); });
          set_ms(state, s, double(c.B * (c.Sq + c.Skv) * c.h * sizeof(float)) * mib);
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(
        c.name("fused_fwd_bwd", threads).c_str(),
        [threads](benchmark::State& state) {
          set_threads(threads);
          auto Q = xattn::ref(c.q), K = xattn::ref(c.k), V = xattn::ref(c.v);
          const auto e = softmax(mask(score(xattn::additive{c.w_q, c.w_k, c.w_v}, Q, K), xattn::lengths(c.lens))) * V;
          const xt::xtensor<float, 3> d_out = xt::ones<float>({c.B, c.Sq, c.d});
          const xattn::schedule sch{.threads = threads};
          const double s = run_timed(state, 0, [&] {
            const auto f = xattn::eval_with_lse(e, sch);
            benchmark::DoNotOptimize(xattn::grad(e, f, d_out, sch));
          });
          // features of queries and keys and their gradients
          set_ms(state, s, double(2 * c.B * (c.Sq + c.Skv) * c.h * sizeof(float)) * mib);
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(
        c.name("d2l_materialised", threads).c_str(),
        [threads](benchmark::State& state) {
          set_threads(threads);
          const double s = run_timed(state, 0, [&] { benchmark::DoNotOptimize(d2l_materialised(c)); });
          set_ms(state, s, double(c.Sq * c.Skv * c.h * sizeof(float)) * mib);  // features, per batch
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace xattn_bench
