#pragma once
// Errors raised inside the DSL while a module runs are re-thrown with the module's name in front,
// so "xattn: values V (2,9,4) do not match ..." reads "xattn: additive_attention.forward: values ...".
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace xattn::nn::detail {

[[noreturn]] inline void rethrow_in(std::string_view who, const std::invalid_argument& e) {
  constexpr std::string_view tag = "xattn: ";
  std::string_view msg = e.what();
  if (msg.substr(0, tag.size()) == tag) msg.remove_prefix(tag.size());
  throw std::invalid_argument(std::string(tag) + std::string(who) + ": " + std::string(msg));
}

/// f(), with any std::invalid_argument it throws re-labelled as coming from `who`.
template <class F>
decltype(auto) labelled(std::string_view who, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const std::invalid_argument& e) {
    rethrow_in(who, e);
  }
}

}  // namespace xattn::nn::detail
