#include "run_typed.hpp"

template xattn::fuzz::verdict xattn::fuzz::run_typed<xattn::fuzz::element::f32>(const fuzz_case&, testing::rng&);
