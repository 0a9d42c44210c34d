#pragma once
// run_typed<T>: dispatch on the terminal kind; each element type is compiled in its own file.
#include "run_case.hpp"

namespace xattn::fuzz {

template <class T>
verdict run_typed(const fuzz_case& c, testing::rng& r) {
  switch (c.kind) {
    case storage::raw:
      return run_on<T, terminal::raw>(c, r);
    case storage::packed:
      return run_on<T, terminal::packed>(c, r);
    default:
      return run_on<T, terminal::rank0>(c, r);
  }
}

}  // namespace xattn::fuzz
