#include "run_typed.hpp"

template xattn::fuzz::verdict xattn::fuzz::run_typed<xattn::fuzz::element::bf16>(const fuzz_case&, testing::rng&);
template xattn::fuzz::verdict xattn::fuzz::run_typed<xattn::fuzz::element::f16>(const fuzz_case&, testing::rng&);
template xattn::fuzz::verdict xattn::fuzz::run_typed<xattn::fuzz::element::mixed>(const fuzz_case&, testing::rng&);
