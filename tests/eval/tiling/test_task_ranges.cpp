// The fused pass's task hand-out: every task exactly once, own range first and in order, the
// rest stolen from the back of the other ranges -- also when threads race for the last tasks.
#include <xattn/eval/tiling/task_ranges.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>
#include <vector>

using xattn::task_ranges;

namespace {
std::vector<std::size_t> drain(task_ranges& q, std::size_t thread) {
  std::vector<std::size_t> got;
  while (const auto t = q.next(thread)) got.push_back(*t);
  return got;
}
}  // namespace

TEST_CASE("task_ranges: a lone thread takes its range in order, then steals the others' from the back") {
  task_ranges q(10, 2);  // ranges [0, 5) and [5, 10)
  REQUIRE(drain(q, 0) == std::vector<std::size_t>{0, 1, 2, 3, 4, 9, 8, 7, 6, 5});
  REQUIRE_FALSE(q.next(1).has_value());

  task_ranges r(7, 3);  // [0, 2), [2, 4), [4, 7)
  REQUIRE(drain(r, 1) == std::vector<std::size_t>{2, 3, 6, 5, 4, 1, 0});
}

TEST_CASE("task_ranges: degenerate counts") {
  task_ranges none(0, 2);
  REQUIRE_FALSE(none.next(0).has_value());
  task_ranges one(1, 4);  // three empty ranges; the task is found wherever it lies
  REQUIRE(drain(one, 0) == std::vector<std::size_t>{0});
  task_ranges zero_threads(3, 0);  // treated as one thread
  REQUIRE(drain(zero_threads, 0) == std::vector<std::size_t>{0, 1, 2});
  task_ranges fewer(4, 2);  // a team smaller than planned: thread ids wrap, nothing is lost
  REQUIRE(drain(fewer, 2) == std::vector<std::size_t>{0, 1, 3, 2});
  REQUIRE_THROWS_WITH(task_ranges(std::size_t(1) << 33, 2), "fused pass: 8589934592 tasks, more than 2^32 - 1");
}

TEST_CASE("task_ranges: racing threads get every task exactly once") {
  for (std::size_t tasks : {1, 2, 3, 17, 64, 1000})
    for (int round = 0; round < 50; ++round) {
      task_ranges q(tasks, 2);
      std::vector<std::size_t> a, b;
      std::thread other([&] { b = drain(q, 1); });
      a = drain(q, 0);
      other.join();
      std::vector<std::size_t> all = a;
      all.insert(all.end(), b.begin(), b.end());
      std::sort(all.begin(), all.end());
      REQUIRE(all.size() == tasks);
      for (std::size_t t = 0; t < tasks; ++t) REQUIRE(all[t] == t);
      REQUIRE(std::is_sorted(a.begin(), std::find_if(a.begin(), a.end(), [&](auto t) { return t >= tasks / 2; })));
    }
}
