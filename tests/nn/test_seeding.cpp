// Parameter init and dropout keys (pure functions of the seed, so runs replay exactly), and the
// modules' default schedule.
#include <xattn/nn/linear.hpp>
#include <xattn/nn/seeding.hpp>
#include <xattn/nn/threads.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <vector>

using namespace xattn::nn;

TEST_CASE("uniform_init: same seed and stream give the same numbers, within the bound, roughly uniform") {
  std::vector<float> a(10001), b(10001), c(10001), d(10001);
  uniform_init(a.data(), a.size(), 0.25, 42, 0);
  uniform_init(b.data(), b.size(), 0.25, 42, 0);
  uniform_init(c.data(), c.size(), 0.25, 43, 0);
  uniform_init(d.data(), d.size(), 0.25, 42, 1);
  REQUIRE(a == b);
  REQUIRE(a != c);  // another seed
  REQUIRE(a != d);  // another stream
  double mean = 0, sq = 0;
  for (float x : a) {
    REQUIRE(x >= -0.25f);
    REQUIRE(x < 0.25f);
    mean += x;
    sq += double(x) * x;
  }
  mean /= double(a.size());
  sq /= double(a.size());
  // U(-0.25, 0.25): mean 0, variance 0.25² / 3 = 0.0208; 5 standard errors of each estimate
  CHECK(std::abs(mean) < 5 * std::sqrt(0.0208 / 10001));
  CHECK(std::abs(sq - 0.0208333) < 5 * 0.0208333 * std::sqrt(0.8 / 10001));
  // a prefix is the same numbers: the count does not change what index n gets
  std::vector<float> e(7);
  uniform_init(e.data(), e.size(), 0.25, 42, 0);
  REQUIRE(std::equal(e.begin(), e.end(), a.begin()));
}

TEST_CASE("linear: PyTorch/equinox init bound 1/sqrt(in), bias only when asked, double and float agree") {
  const linear<float> l(16, 8, true, 5, 0, "l");
  const linear<double> ld(16, 8, true, 5, 0, "l");
  REQUIRE(l.weight().shape()[0] == 8);
  REQUIRE(l.weight().shape()[1] == 16);
  REQUIRE(l.bias().size() == 8);
  for (float w : l.weight()) REQUIRE(std::abs(w) <= 0.25f);
  for (std::size_t n = 0; n < l.weight().size(); ++n) REQUIRE(l.weight().flat(n) == float(ld.weight().flat(n)));
  REQUIRE(linear<float>(16, 8, false, 5, 0, "l").bias().size() == 0);
  REQUIRE(l.weight() != linear<float>(16, 8, true, 5, 1, "l").weight());
}

TEST_CASE("call_seed: distinct per call, replayed by rewind, different per module seed") {
  dropout_counter c(9);
  std::set<std::uint64_t> seen;
  for (int n = 0; n < 1000; ++n) seen.insert(c.next());
  REQUIRE(seen.size() == 1000);
  REQUIRE(c.calls() == 1000);
  c.rewind(3);
  REQUIRE(c.next() == call_seed(9, 3));
  REQUIRE(call_seed(9, 0) != call_seed(10, 0));
  REQUIRE(call_seed(9, 1) != call_seed(10, 0));  // not just seed + n
}

TEST_CASE("module_schedule: the modules' serial cut-off of 2^28 flop unless the user chose a schedule") {
  REQUIRE(module_schedule(std::nullopt).serial_below_flop == double(1u << 28));
  REQUIRE(module_schedule(std::nullopt).threads == 0);  // decided by resolve_schedule with that cut-off
  REQUIRE(module_schedule(xattn::schedule{32, 64, 2}).threads == 2);
  REQUIRE(module_schedule(xattn::schedule{32, 64, 2}).serial_below_flop == 0);
}
