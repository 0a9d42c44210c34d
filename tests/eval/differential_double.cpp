#include "differential_run.hpp"

TEST_CASE("fused equals the double reference: double, every scorer x mask family, random shapes") {
  const int n = xattn::testing::run_all_pairs<double>(2000, 6);
  REQUIRE(n >= 450);
}
