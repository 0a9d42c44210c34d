#pragma once
// The schedule a module gives its fused pass when the user has not set one.
//
// A module runs OpenBLAS (projections) and OpenMP (fused pass) back to back. With libgomp's
// default wait policy the OpenMP team spins for milliseconds after each parallel region, on the
// cores OpenBLAS then needs, so for a small attention a second thread costs more than it saves.
// A module's default schedule therefore runs the pass serially below 2^28 flop (a few
// milliseconds on one core, comparable to that spinning), above on every thread: the library's
// own rule (resolve_schedule) with a higher cut-off.
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
