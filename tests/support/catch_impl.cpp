// Catch2's implementation, compiled once for every test executable (it takes about 30 s), and the
// runner's entry point, which the mains call.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_run.hpp"

int xattn::testing::run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }
