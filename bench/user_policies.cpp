// Training user code: the catalogue's user policies and modifier, differentiated by grad() on the
// tape with their learnables (no derivative written), forward alone and forward + backward.
// Names: user_policy/<form>/<policy>/<B>/<H>/<Sq>/<Skv>/<D>/<threads>, counter ms; policies
// cosine_temperature (operator() per pair), laplace (projections + combine per pair),
// weighted_dot (separable: learnable weights in the row pass, pairs on the microkernels) and
// relative_bias (a learnable table added to Q·Kᵀ/√D, causal). bench/torch_d2l.py adds form
// torch_fwd_bwd: the same scores written in PyTorch 1.13 and materialised, as a user of d2l's
// recipe would write them, with autograd.
#include "catalogue/cosine_temperature.hpp"
#include "catalogue/laplace_kernel.hpp"
#include "catalogue/relative_bias.hpp"
#include "catalogue/weighted_dot.hpp"
#include "common.hpp"

#include <xattn/xattn.hpp>
#include <xtensor/xrandom.hpp>

#include <cmath>
#include <string>

namespace xattn_bench {

namespace {

struct user_case {
  std::size_t B = 1, H = 4, S = 256, D = 64;
  xt::xtensor<float, 4> q, k, v, d_out;
  user_case() {
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

}  // namespace

void register_user_policies() {
  static const user_case c;
  using namespace xattn;
  register_policy(c, "cosine_temperature", [](const user_case& c) {
    return softmax(score(dsl::cosine_with_temperature{0.1}, ref(c.q), ref(c.k))) * ref(c.v);
  });
  register_policy(c, "laplace", [](const user_case& c) {
    return softmax(score(dsl::laplace_kernel{8.0}, ref(c.q), ref(c.k))) * ref(c.v);
  });
  register_policy(c, "weighted_dot", [](const user_case& c) {
    dsl::weighted_dot p;
    for (std::size_t d = 0; d < c.D; ++d) p.w.push_back(1.0 + 0.5 * std::sin(double(d)));
    return softmax(score(p, ref(c.q), ref(c.k))) * ref(c.v);
  });
  register_policy(c, "relative_bias", [](const user_case& c) {
    dsl::relative_bias rb{{}, 16};
    for (std::size_t n = 0; n < c.H * rb.width(); ++n) rb.table.push_back(0.1 * std::sin(double(n)));
    return softmax(mask(modify(ref(c.q) * trans(ref(c.k)) / 8.0f, rb), causal())) * ref(c.v);
  });
}

}  // namespace xattn_bench
