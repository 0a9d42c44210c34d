#pragma once
// Every exception of a C entry point turned into a status and the calling thread's message.
#include "args.hpp"

#include <cctype>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace xattn::c_api {

/// The calling thread's message for its last failed call ("" after a call that succeeded).
inline std::string& last_error() {
  thread_local std::string message;
  return message;
}

/// The library's message m in the C caller's terms: a C++ entry point it names first ("xattn:
/// grad_into(e, out, lse, ...): ...") becomes the C function called (`who`), and `lengths(lens)`'s
/// lens desc.lengths. A C caller knows neither signature.
inline std::string in_c_terms(std::string m, const char* who) {
  constexpr std::string_view prefix = "xattn: ";
  if (who == nullptr || m.rfind(prefix, 0) != 0) return m;
  // the cache's own checks name its methods: "xattn: kv_cache.append: ..." is xattn_cache_append's
  if (m.compare(prefix.size(), 8, "kv_cache") == 0)
    if (const std::size_t colon = m.find(": ", prefix.size()); colon != std::string::npos)
      return std::string(prefix) + who + m.substr(colon);
  const std::size_t open = m.find('(', prefix.size()), end = m.find("): ", prefix.size());
  if (open == std::string::npos || end == std::string::npos || m.find(": ", prefix.size()) != end + 1) return m;
  const std::string name = m.substr(prefix.size(), open - prefix.size());
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return m;
  std::string rest = m.substr(end + 3);
  if (name == "lengths" && rest.rfind("lens", 0) == 0) rest = "desc.lengths" + rest.substr(4);
  // the expression e is, to a C caller, the inputs and desc's options
  constexpr std::pair<std::string_view, std::string_view> phrases[] = {
      {"does not belong to e:", "does not belong to these inputs and options:"},
      {"what eval_with_lse_into wrote for e and these inputs",
       "what xattn_forward wrote for these inputs and options"}};
  for (const auto& [cxx, c] : phrases)
    if (const std::size_t at = rest.find(cxx); at != std::string::npos) rest.replace(at, cxx.size(), c);
  return std::string(prefix) + who + ": " + rest;
}

/// f() run with every exception turned into its status; XATTN_OK clears the message. who: the C
/// function called, which the message then names in place of the C++ entry points it called.
template <class F>
xattn_status guarded(const char* who, F&& f) noexcept {
  try {
    f();
    last_error().clear();
    return XATTN_OK;
  } catch (const unsupported& e) {
    last_error() = in_c_terms(e.what(), who);
    return XATTN_UNSUPPORTED;
  } catch (const std::invalid_argument& e) {
    last_error() = in_c_terms(e.what(), who);
    return XATTN_INVALID_ARGUMENT;
  } catch (const std::length_error& e) {
    last_error() = in_c_terms(e.what(), who);
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

template <class F>
xattn_status guarded(F&& f) noexcept {
  return guarded(nullptr, std::forward<F>(f));
}

}  // namespace xattn::c_api
