#include "run_typed.hpp"

template xattn::fuzz::verdict xattn::fuzz::run_typed<double>(const fuzz_case&, testing::rng&);
