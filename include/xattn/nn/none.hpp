#pragma once
// "No argument": forward(q, k, v) without valid_lens, or without a mask. Its own type, so that
// leaving the argument out selects the expression without a mask at compile time.
namespace xattn::nn {

struct none_t {};
inline constexpr none_t none{};

template <class A>
inline constexpr bool is_none_v = false;
template <>
inline constexpr bool is_none_v<none_t> = true;

}  // namespace xattn::nn
