// Thread safety: eval() keeps no state between calls, so expressions may be evaluated from several
// std::threads at once -- different expressions, or the same (const) expression object -- with
// each call free to start its own OpenMP team. Every concurrent result must be bitwise the serial
// one (bitwise: see test_determinism.cpp). Built a second time with -fsanitize=thread when
// XATTN_TSAN is on.
#include "support/bitwise.hpp"
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

using namespace xattn;
using testing::bitwise_equal;

namespace {

struct operands {
  testing::rng r{60};
  xt::xtensor<float, 4> q = r.tensor<float>({2, 4, 150, 16}), k = r.tensor<float>({2, 2, 257, 16}),
                        v = r.tensor<float>({2, 2, 257, 8});
  xt::xtensor<double, 3> qd = r.tensor<double>({3, 33, 12}), kd = r.tensor<double>({3, 51, 12}),
                         vd = r.tensor<double>({3, 51, 5});
  xt::xtensor<int, 1> lens = {140, 257};
  xt::xtensor<float, 2> bias_t = r.tensor<float>({150, 257});
  xt::xtensor<double, 2> wq = r.tensor<double>({6, 12}), wk = r.tensor<double>({6, 12});
  xt::xtensor<double, 1> wv = r.vector<double>(6);
};

/// Jobs that evaluate one expression each and say whether the result matches `want`.
constexpr int reps = 10;  // enough for the threads' evaluations to overlap

std::vector<std::function<bool(int)>> make_jobs(const operands& o) {
  auto Q = ref(o.q), K = ref(o.k), V = ref(o.v);
  auto Qd = ref(o.qd), Kd = ref(o.kd), Vd = ref(o.vd);
  std::vector<std::function<bool(int)>> jobs;
  auto add = [&jobs](auto e) {
    REQUIRE(explain(e, {8, 32, 2}).schedule.forward.threads ==
            2);  // a job asked for 2 threads runs on 2, however small
    auto want = std::make_shared<decltype(eval(e))>(eval(e, {8, 32, 1}));  // the serial result
    jobs.push_back([e, want](int threads) { return bitwise_equal(*want, eval(e, {8, 32, threads})); });
  };
  add(softmax(mask(Q * trans(K) / 4.0, causal())) * V);
  add(softmax(mask(softcap(Q * trans(K), 3.0) + bias(o.bias_t), lengths(o.lens, masked_rows::zero))) * V);
  add(softmax(alibi(Q * trans(K), alibi_op::standard_slopes(4))) * V);
  add(softmax(mask(score(gaussian{2.0}, Qd, Kd), window(10, 2))) * Vd);
  add(softmax(score(additive{o.wq, o.wk, o.wv}, Qd, Kd)) * Vd);
  add(softmax(score(cosine{0.3}, Qd, Kd)) * Vd);
  return jobs;
}

}  // namespace

TEST_CASE("different expressions evaluated concurrently from std::threads equal their serial results", "[threads]") {
  const operands o;
  const auto jobs = make_jobs(o);
  std::atomic<int> mismatches{0}, runs{0};
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < jobs.size(); ++t)
    pool.emplace_back([&, t] {
      for (int rep = 0; rep < reps; ++rep) {
        mismatches += !jobs[t](1 + (rep + int(t)) % 2);  // alternate serial and 2-thread OpenMP teams
        ++runs;
      }
    });
  for (auto& th : pool) th.join();
  REQUIRE(runs == int(jobs.size()) * reps);
  REQUIRE(mismatches == 0);
}

TEST_CASE("one expression object shared by several threads", "[threads]") {
  const operands o;
  auto Q = ref(o.q), K = ref(o.k), V = ref(o.v);
  xt::xtensor<bool, 2> keep = xt::xtensor<bool, 2>::from_shape({150, 257});
  testing::rng r(61);
  for (auto& x : keep) x = r.coin(0.8);
  const auto e = softmax(mask(Q * trans(K), bool_mask(std::move(keep)))) * V;  // owns its mask storage
  const xt::xtensor<float, 4> want = eval(e, {8, 32, 1});
  std::atomic<int> mismatches{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t)
    pool.emplace_back([&, t] {
      for (int rep = 0; rep < reps; ++rep) mismatches += !bitwise_equal(want, eval(e, {8, 32, 1 + t % 2}));
    });
  for (auto& th : pool) th.join();
  REQUIRE(mismatches == 0);
}
