#pragma once
// run_typed<E>: dispatch on the terminal kind; each element kind is compiled in its own file.
#include "run_case.hpp"

namespace xattn::fuzz {

template <element E>
verdict run_typed(const fuzz_case& c, testing::rng& r) {
  switch (c.kind) {
    case storage::raw:
      return run_on<E, terminal::raw>(c, r);
    case storage::packed:
      return run_on<E, terminal::packed>(c, r);
    case storage::cache:
      if constexpr (E == element::f32)
        if (c.fp8_pages) return run_on<E, terminal::cache, float8_e4m3>(c, r);
      if constexpr (E == element::f32)
        if (c.q4_pages)
          return c.q4c_keys ? run_on<E, terminal::cache, pages_of<q4c, q4>>(c, r)
                            : run_on<E, terminal::cache, q4>(c, r);
      if constexpr (E != element::f64 && E != element::mixed) return run_on<E, terminal::cache>(c, r);
      return {false, "kv_cache pages are not double or mixed"};
    default:
      return run_on<E, terminal::rank0>(c, r);
  }
}

}  // namespace xattn::fuzz
