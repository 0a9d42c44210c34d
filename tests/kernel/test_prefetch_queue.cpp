// The prefetch queue asks for every line of what it was given, once, in order, and nothing more:
// its ranges' lines counted through pending() as they are issued, a full queue making room by
// dropping the ranges already asked for.
#include <xattn/kernel/prefetch_queue.hpp>

#include <catch2/catch.hpp>

#include <vector>

using xattn::kernel::prefetch_queue;

TEST_CASE("prefetch_queue: every line of every row, once") {
  std::vector<char> mem(1 << 16);
  prefetch_queue q;
  REQUIRE(q.pending() == 0);
  q.add(mem.data(), 3, 256, 1024);             // 3 rows of 4 lines
  q.add(mem.data() + 8192, 2, 65, 512, true);  // 65 bytes: 2 lines per row
  q.add(mem.data(), 0, 256, 64);               // nothing
  q.add(mem.data(), 5, 0, 64);                 // nothing
  REQUIRE(q.pending() == 3 * 4 + 2 * 2);
  q.issue(5);
  REQUIRE(q.pending() == 11);
  q.issue(0);
  REQUIRE(q.pending() == 11);
  q.issue(100);  // no more than there is
  REQUIRE(q.pending() == 0);
  q.add(mem.data(), 1, 64, 0);  // reusable once drained
  REQUIRE(q.pending() == 1);
  q.clear();
  REQUIRE(q.pending() == 0);
  q.issue(10);
  REQUIRE(q.pending() == 0);
}

TEST_CASE("prefetch_queue: a full queue drops only the ranges already asked for") {
  std::vector<char> mem(1 << 16);
  prefetch_queue q;
  for (std::size_t i = 0; i < prefetch_queue::capacity; ++i) q.add(mem.data() + 64 * i, 1, 64, 64);
  REQUIRE(q.pending() == prefetch_queue::capacity);
  q.add(mem.data(), 1, 64, 64);  // full, none asked for yet: ignored
  REQUIRE(q.pending() == prefetch_queue::capacity);
  q.issue(3);
  q.add(mem.data(), 2, 128, 128);  // room made by the 3 ranges asked for
  REQUIRE(q.pending() == prefetch_queue::capacity - 3 + 4);
  q.issue(prefetch_queue::capacity - 3 + 3);
  REQUIRE(q.pending() == 1);
  q.issue(1);
  REQUIRE(q.pending() == 0);
}
