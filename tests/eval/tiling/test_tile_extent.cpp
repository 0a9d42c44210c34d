// key_ranges: which keys a masked tile's query rows see, and which query rows see a range of keys,
// the ranges the backward's tile products skip outside of (kernel::keys_seen, kernel::rows_seeing).
#include <xattn/eval/tiling/tile_extent.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <utility>

namespace {

using range = std::pair<std::size_t, std::size_t>;

// Query i sees keys (i - 4, i]: a causal window of 4 keys.
struct window4 {
  bool visible(std::size_t, std::size_t, std::size_t i, std::size_t j) const { return j <= i && j + 4 > i; }
};
// Query 10 sees nothing.
struct blind_row {
  bool visible(std::size_t, std::size_t, std::size_t i, std::size_t) const { return i != 10; }
};

}  // namespace

TEST_CASE("key_ranges: the keys query rows see and the query rows that see keys, under the masks") {
  // Rows 8..11 by keys 4..15: local row r sees local keys [r + 1, r + 5), except row 2 (query 10).
  xattn::key_ranges<float> ranges(4, 16);
  ranges.find(boost::hana::make_tuple(window4{}, blind_row{}), 0, 0, 8, 4, 4, 12);
  REQUIRE(ranges.ranged());
  CHECK(ranges.hidden(0, 0));
  CHECK_FALSE(ranges.hidden(0, 1));
  CHECK_FALSE(ranges.hidden(0, 4));
  CHECK(ranges.hidden(0, 5));
  CHECK(ranges.hidden(2, 3));

  const xattn::kernel::keys_seen rows = ranges.rows();
  CHECK(rows(0, 1) == range{1, 5});
  CHECK(rows(0, 2) == range{1, 6});
  CHECK(rows(2, 1) == range{0, 0});  // the blind row sees nothing
  CHECK(rows(1, 3) == range{2, 8});
  CHECK(rows(0, 4) == range{1, 8});

  const xattn::kernel::rows_seeing keys = ranges.keys();
  CHECK(keys(0, 1) == range{0, 0});  // no row sees key 4
  CHECK(keys(0, 2) == range{0, 1});
  CHECK(keys(4, 1) == range{0, 4});  // rows 0, 1 and 3
  CHECK(keys(5, 1) == range{1, 4});
  CHECK(keys(7, 1) == range{3, 4});
  CHECK(keys(8, 4) == range{0, 0});

  ranges.whole(4);  // a tile no mask hides anything in: every key, every row
  CHECK_FALSE(ranges.ranged());
  CHECK(ranges.rows()(1, 2) == range{0, std::size_t(-1)});
  CHECK(ranges.keys()(3, 4) == range{0, std::size_t(-1)});
}
