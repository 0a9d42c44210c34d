#pragma once
// The Catch2 runner, from support/catch_impl.cpp: a main calls it without parsing catch.hpp.

namespace xattn::testing {

int run_catch(int argc, char** argv);

}  // namespace xattn::testing
