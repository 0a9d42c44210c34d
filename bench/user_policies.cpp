// Training user code: scoring functions written the natural way (operator() alone, generic, the
// learnables inline: dsl/catalogue/plain_scores.hpp and cosine_temperature), differentiated by
// grad() with no derivative written, forward alone and forward + backward, at two shapes.
// Names: user_policy/<form>/<policy>/<B>/<H>/<Sq>/<Skv>/<D>/<threads>, counter ms; forms fused
// (eval) and fused_fwd_bwd (eval_with_lse, then grad), at (1, 4, 256², 64) and (1, 8, 2048², 64),
// scaled_dot and cosine_temperature also at (1, 8, 512², 64). Policies: cosine_temperature, gaussian,
// bilinear, weighted_dot and laplace (plain operator(); recorded and separated, laplace pair by
// pair), relative_bias (a learnable table added to Q·Kᵀ/√D, causal), scaled_dot (the built-in
// Q·Kᵀ/√D, the yardstick), and the hand-separated forms of two of them for comparison
// (weighted_dot_separable: `separable` with projections; laplace_combine: projections and
// combine). bench/torch_d2l.py adds forms torch_fwd and torch_fwd_bwd: the same scores written in
// PyTorch 1.13 and materialised, as a user of d2l's recipe would write them, with autograd.
#include "catalogue/cosine_temperature.hpp"
#include "catalogue/laplace_kernel.hpp"
#include "catalogue/plain_scores.hpp"
#include "catalogue/relative_bias.hpp"
#include "catalogue/weighted_dot.hpp"
#include "common.hpp"

#include <xattn/xattn.hpp>
#include <xtensor/xrandom.hpp>

#include <cmath>
#include <memory>
#include <string>

namespace xattn_bench {

namespace {

struct user_case {
  std::size_t B, H, S, D;
  xt::xtensor<float, 4> q, k, v, d_out;
  user_case(std::size_t b, std::size_t h, std::size_t s, std::size_t d) : B(b), H(h), S(s), D(d) {
    xt::random::seed(5);
    q = xt::random::rand<float>({B, H, S, D}, -1, 1);
    k = xt::random::rand<float>({B, H, S, D}, -1, 1);
    v = xt::random::rand<float>({B, H, S, D}, -1, 1);
    d_out = xt::random::rand<float>({B, H, S, D}, -1, 1);
  }
  std::string name(const char* form, const char* policy, int threads) const {
    std::string n = std::string("user_policy/") + form + "/" + policy;
    for (std::size_t x : {B, H, S, S, D, std::size_t(threads)}) {
      n += '/';
      n += std::to_string(x);
    }
    return n;
  }
};

template <class Make>
void register_policy(const user_case& c, const char* policy, Make make) {
  for (int threads : thread_counts) {
    benchmark::RegisterBenchmark(
        c.name("fused", policy, threads).c_str(),
        [&c, make, threads](benchmark::State& state) {
          set_threads(threads);
          const auto e = make(c);
          const double s = run_timed(state, 0, [&] { benchmark::DoNotOptimize(xattn::eval(e, {.threads = threads})); });
          state.counters["ms"] = 1e3 * s;
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(c.name("fused_fwd_bwd", policy, threads).c_str(),
                                 [&c, make, threads](benchmark::State& state) {
                                   set_threads(threads);
                                   const auto e = make(c);
                                   const xattn::schedule sch{.threads = threads};
                                   const double s = run_timed(state, 0, [&] {
                                     const auto f = xattn::eval_with_lse(e, sch);
                                     benchmark::DoNotOptimize(xattn::grad(e, f, c.d_out, sch));
                                   });
                                   state.counters["ms"] = 1e3 * s;
                                 })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

/// One learnable per feature, 1 + sin(d) / 2, as bench/torch_d2l.py's weights.
template <class P>
P with_weights(std::size_t n) {
  P p;
  for (std::size_t d = 0; d < n; ++d) p.w.push_back(1.0 + 0.5 * std::sin(double(d)));
  return p;
}

}  // namespace

void register_user_policies() {
  static const user_case small(1, 4, 256, 64), large(1, 8, 2048, 64), middle(1, 8, 512, 64);
  using namespace xattn;
  // the cosine as written against the built-in scaled dot product on a middle shape too
  register_policy(middle, "scaled_dot",
                  [](const user_case& c) { return softmax(ref(c.q) * trans(ref(c.k)) / 8.0f) * ref(c.v); });
  register_policy(middle, "cosine_temperature", [](const user_case& c) {
    return softmax(score(dsl::cosine_with_temperature{0.1}, ref(c.q), ref(c.k))) * ref(c.v);
  });
  for (const user_case* c : {&small, &large}) {
    register_policy(*c, "scaled_dot",
                    [](const user_case& c) { return softmax(ref(c.q) * trans(ref(c.k)) / 8.0f) * ref(c.v); });
    register_policy(*c, "cosine_temperature", [](const user_case& c) {
      return softmax(score(dsl::cosine_with_temperature{0.1}, ref(c.q), ref(c.k))) * ref(c.v);
    });
    register_policy(*c, "gaussian", [](const user_case& c) {
      return softmax(score(dsl::gaussian_score{4.0}, ref(c.q), ref(c.k))) * ref(c.v);
    });
    register_policy(*c, "bilinear", [](const user_case& c) {
      dsl::bilinear_score p;  // W = I/8 + sin(r·D + c)/64, as bench/torch_d2l.py's
      p.cols = c.D;
      for (std::size_t n = 0; n < c.D * c.D; ++n)
        p.w.push_back((n / c.D == n % c.D ? 0.125 : 0.0) + std::sin(double(n)) / 64);
      return softmax(score(p, ref(c.q), ref(c.k))) * ref(c.v);
    });
    register_policy(*c, "weighted_dot", [](const user_case& c) {
      return softmax(score(with_weights<dsl::weighted_dot_score>(c.D), ref(c.q), ref(c.k))) * ref(c.v);
    });
    register_policy(*c, "laplace", [](const user_case& c) {
      return softmax(score(dsl::laplace_score{8.0}, ref(c.q), ref(c.k))) * ref(c.v);
    });
    register_policy(*c, "relative_bias", [](const user_case& c) {
      dsl::relative_bias rb{{}, 16};
      for (std::size_t n = 0; n < c.H * rb.width(); ++n) rb.table.push_back(0.1 * std::sin(double(n)));
      return softmax(mask(modify(ref(c.q) * trans(ref(c.k)) / 8.0f, rb), causal())) * ref(c.v);
    });
    if (c != &small)
      continue;  // the hand-separated forms at the small shape only (laplace_combine's
                 // backward is on the tape, pair by pair)
    register_policy(*c, "weighted_dot_separable", [](const user_case& c) {
      return softmax(score(with_weights<dsl::weighted_dot>(c.D), ref(c.q), ref(c.k))) * ref(c.v);
    });
    register_policy(*c, "laplace_combine", [](const user_case& c) {
      return softmax(score(dsl::laplace_kernel{8.0}, ref(c.q), ref(c.k))) * ref(c.v);
    });
  }
}

}  // namespace xattn_bench
