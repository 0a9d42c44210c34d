// The one translation unit that builds Catch2's runner, so test files stay cheap to recompile.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
