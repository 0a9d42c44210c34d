#pragma once
// Learnable parameters of user code. A scoring policy or score modifier written generically
// (a template over its scalar type) holds its parameters as learnable<> and lists them in
//   auto parameters() const { return std::tie(tau, table); }   // learnables, or contiguous ranges of them
// and uses them as T(tau) inside its generic code. grad() then differentiates them too, with no
// derivative written: T(tau) on the backward's reverse-mode scalars (var.hpp, var_lanes.hpp) is an
// input of their tape, on the recording scalar (record/recorded.hpp) a leaf of the record, on
// param_dual a derivative of its own, on a dual number (dual.hpp) the seeded direction when the
// reference oracle asks for it.
// g.dscore (policies) and g.dmodify (modifiers) hold the gradients as learned_gradients, one entry
// per learnable in parameters()'s order, ranges flattened.
#include "dual.hpp"
#include "param_dual.hpp"
#include "record/recorded.hpp"
#include "var.hpp"
#include "var_lanes.hpp"

#include <concepts>
#include <cstddef>
#include <iterator>
#include <tuple>
#include <type_traits>
#include <vector>

namespace xattn {

namespace detail {
/// The learnable whose conversion to a dual number carries derivative 1 on this thread.
inline const void*& seeded_learnable() {
  thread_local const void* p = nullptr;
  return p;
}
}  // namespace detail

template <class T = double>
struct learnable {
  static_assert(std::is_floating_point_v<T>, "xattn::learnable<T>: T must be float or double");
  T value{};

  constexpr learnable() = default;
  constexpr learnable(T v) : value(v) {}  // `learnable<> tau = 0.1`, `{.tau = 0.1}`

  template <std::floating_point U>
  constexpr explicit operator U() const {
    return U(value);
  }
  template <class U>
  operator dual<U>() const {
    return {U(value), detail::seeded_learnable() == this ? U(1) : U(0)};
  }
  template <class U>
  operator var<U>() const {
    return tape<U>::local().learned_input(this, U(value));
  }
  template <class U>
  operator var_lanes<U>() const {
    return lane_tape<U>::local().learned_input(this, U(value));
  }
  template <class U>
  operator param_dual<U>() const {
    return param_dual<U>::learnable(this, U(value));
  }
  operator recorded() const { return recorded::param(this, double(value)); }  // a leaf of the record
};

template <class X>
inline constexpr bool is_learnable_v = false;
template <class T>
inline constexpr bool is_learnable_v<learnable<T>> = true;

/// The element type of a contiguous range (std::data and std::size: containers, spans, arrays);
/// void for anything else. std::ranges' concepts say the same of these, but <ranges> is among the
/// heaviest standard headers, and every translation unit would parse it.
template <class X>
struct contiguous_element {
  using type = void;
};
template <class X>
requires requires(X& x) {
  std::data(x);
  std::size(x);
}
struct contiguous_element<X> {
  using type = std::remove_cv_t<std::remove_pointer_t<decltype(std::data(std::declval<X&>()))>>;
};

/// One entry of parameters(): a learnable, or a contiguous range of them.
template <class X>
concept learnable_entry =
    is_learnable_v<std::remove_cvref_t<X>> || is_learnable_v<typename contiguous_element<X>::type>;

namespace detail {
template <class Tuple>
constexpr bool all_learnable_entries() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (learnable_entry<std::tuple_element_t<I, Tuple>> && ...);
  }
  (std::make_index_sequence<std::tuple_size_v<Tuple>>{});
}
}  // namespace detail

/// P lists learnable parameters: parameters() const returns a tuple of learnables and ranges of them.
template <class P>
concept declares_learnables = requires(const P& p) {
  std::tuple_size<std::remove_cvref_t<decltype(p.parameters())>>::value;
}
&&detail::all_learnable_entries<std::remove_cvref_t<decltype(std::declval<const P&>().parameters())>>();

/// A type with parameters() lists learnables there (checked by grad(), which would otherwise see none).
template <class X>
constexpr bool check_parameters() {
  constexpr bool lists = requires(X & x) { x.parameters(); };
  static_assert(!lists || declares_learnables<X>,
                "xattn: grad(e): parameters() must be a const member function returning std::tie of the "
                "xattn::learnable members (or contiguous ranges of them, e.g. std::vector<xattn::learnable<>>) "
                "that grad() differentiates");
  return !lists || declares_learnables<X>;
}

/// grad(e).dscore of a policy with learnables, and each of grad(e).dmodify: d loss / d parameter,
/// in parameters()'s order (ranges flattened).
struct learned_gradients {
  std::vector<double> d;

  double operator[](std::size_t n) const { return d.at(n); }
  std::size_t size() const { return d.size(); }
  auto parts() { return std::tie(d); }  // context parallelism sums the ranks' parts
};

/// The learnables of one object, in parameters()'s order: which slot of learned_gradients an
/// address is (the tape and the seed identify a learnable by its address in that object).
class parameter_slots {
 public:
  static constexpr std::size_t npos = std::size_t(-1);

  parameter_slots() = default;
  template <declares_learnables P>
  explicit parameter_slots(const P& p) {
    std::apply([&](const auto&... entry) { (add(entry), ...); }, p.parameters());
  }
  std::size_t size() const { return count_; }
  /// The slot of the learnable at `address`, or npos.
  std::size_t find(const void* address) const {
    const auto* a = static_cast<const std::byte*>(address);
    for (const range& r : ranges_)
      if (a >= r.begin && a < r.begin + r.count * r.stride)  // per score in the backward: a shift, not a division
        return r.first + (r.shift >= 0 ? std::size_t(a - r.begin) >> r.shift : std::size_t(a - r.begin) / r.stride);
    return npos;
  }
  /// The address of slot n (to seed it).
  const void* address(std::size_t n) const {
    for (const range& r : ranges_)
      if (n >= r.first && n < r.first + r.count) return r.begin + (n - r.first) * r.stride;
    return nullptr;
  }
  learned_gradients zeros() const { return {std::vector<double>(count_, 0.0)}; }

 private:
  struct range {
    const std::byte* begin;
    std::size_t count, stride, first;
    int shift = -1;  // log2(stride) when stride is a power of two
  };
  static int log2_of(std::size_t stride) {
    int s = 0;
    while ((std::size_t(1) << s) < stride) ++s;
    return (std::size_t(1) << s) == stride ? s : -1;
  }
  template <class X>
  void add(const X& x) {
    if constexpr (is_learnable_v<X>) {
      ranges_.push_back({reinterpret_cast<const std::byte*>(&x), 1, sizeof(X), count_, log2_of(sizeof(X))});
      ++count_;
    } else {
      using L = typename contiguous_element<const X>::type;
      const std::size_t n = std::size_t(std::size(x));
      ranges_.push_back({reinterpret_cast<const std::byte*>(std::data(x)), n, sizeof(L), count_, log2_of(sizeof(L))});
      count_ += n;
    }
  }
  std::vector<range> ranges_;
  std::size_t count_ = 0;
};

/// Adds d (the adjoints of the tape's learned inputs, scaled by g) into out at their slots.
template <class T, class Out>
void add_learned_adjoints(const tape<T>& t, const parameter_slots& slots, T g, Out&& out) {
  for (const auto& leaf : t.learned())
    if (const std::size_t n = slots.find(leaf.address); n != parameter_slots::npos) out[n] += g * t.adjoint(leaf.id);
}

/// Seeds the learnable at `address` for dual numbers on this thread while alive.
class seed_learnable {
 public:
  explicit seed_learnable(const void* address) : previous_(detail::seeded_learnable()) {
    detail::seeded_learnable() = address;
  }
  ~seed_learnable() { detail::seeded_learnable() = previous_; }
  seed_learnable(const seed_learnable&) = delete;
  seed_learnable& operator=(const seed_learnable&) = delete;

 private:
  const void* previous_;
};

}  // namespace xattn
