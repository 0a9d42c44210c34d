#pragma once
// The what() of the std::invalid_argument a call throws; anything else fails the test. Lets a test
// check one message against several parts without re-running the call.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

namespace xattn::hardening {

template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("expected std::invalid_argument, but the call returned");
  return {};
}

}  // namespace xattn::hardening
