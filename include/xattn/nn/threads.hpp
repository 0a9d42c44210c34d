#pragma once
// The schedule a module gives its fused pass when the user has not set one.
//
// A module runs OpenBLAS (projections) and OpenMP (fused pass) back to back. With libgomp's
// default wait policy the OpenMP team spins for milliseconds after each parallel region, on the
// cores OpenBLAS then needs. For a small attention that costs far more than the second thread
// saves: an 8-head MHA forward (d = 512, S = 128) took 12-24 ms with a 2-thread fused pass and
// 3.3 ms with 1 on the 2-core dev machine (2.6 ms with OMP_WAIT_POLICY=passive). So a module's
// default schedule runs the pass serially below ~2^28 flop (about 2.5 ms on one core), above on
// every thread: the library's own rule (resolve_schedule) with a higher cut-off.
// set_schedule() on a module overrides this; OMP_WAIT_POLICY=passive is still the best setting.
#include "../schedule.hpp"

#include <optional>

namespace xattn::nn {

inline constexpr double serial_below_flop = double(1u << 28);

/// The user's schedule if set, else the default one with the modules' serial cut-off.
inline schedule module_schedule(const std::optional<schedule>& user) {
  if (user) return *user;
  return schedule{.serial_below_flop = serial_below_flop};
}

}  // namespace xattn::nn
