#pragma once
// Every exception of a C entry point turned into a status and the calling thread's message.
#include "args.hpp"

#include <new>
#include <stdexcept>
#include <string>

namespace xattn::c_api {

/// The calling thread's message for its last failed call ("" after a call that succeeded).
inline std::string& last_error() {
  thread_local std::string message;
  return message;
}

/// f() run with every exception turned into its status; XATTN_OK clears the message.
template <class F>
xattn_status guarded(F&& f) noexcept {
  try {
    f();
    last_error().clear();
    return XATTN_OK;
  } catch (const unsupported& e) {
    last_error() = e.what();
    return XATTN_UNSUPPORTED;
  } catch (const std::invalid_argument& e) {
    last_error() = e.what();
    return XATTN_INVALID_ARGUMENT;
  } catch (const std::length_error& e) {
    last_error() = e.what();
    return XATTN_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    last_error() = "out of memory";
    return XATTN_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    last_error() = std::string("internal error: ") + e.what();
    return XATTN_INTERNAL;
  } catch (...) {
    last_error() = "internal error: an unknown exception";
    return XATTN_INTERNAL;
  }
}

}  // namespace xattn::c_api
