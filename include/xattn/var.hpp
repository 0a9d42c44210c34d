#pragma once
// Reverse-mode automatic differentiation of small scalar functions. A var<T> is a value and the
// node of this thread's tape that computed it; running code written generically in its scalar
// type on vars records one node per operation, and one backward sweep then gives the derivative
// of the outputs with respect to every input at once: O(cost of the code), where dual numbers
// (dual.hpp) need one evaluation per input. The backward differentiates a user policy's per-pair
// and per-row code this way, and with it the policy's learnable parameters (learnable.hpp).
// The math functions are dual's, so code that runs on one runs on the other.
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace xattn {

template <class T>
class tape;

template <class T>
struct var {
  T v{};                 // value
  std::uint32_t id = 0;  // the node that computed it; 0: a constant (nothing to differentiate)

  constexpr var() = default;
  constexpr var(T value) : v(value) {}  // constants lift implicitly: `T s = 0`
  template <class U>
  requires std::is_arithmetic_v<U> &&(!std::is_same_v<U, T>)constexpr var(U value) : v(T(value)) {}
  constexpr var(T value, std::uint32_t node) : v(value), id(node) {}

  var& operator+=(const var& o) { return *this = *this + o; }
  var& operator-=(const var& o) { return *this = *this - o; }
  var& operator*=(const var& o) { return *this = *this * o; }
  var& operator/=(const var& o) { return *this = *this / o; }

  friend var operator+(const var& a, const var& b) { return record(a.v + b.v, a, T(1), b, T(1)); }
  friend var operator-(const var& a, const var& b) { return record(a.v - b.v, a, T(1), b, T(-1)); }
  friend var operator-(const var& a) { return record(-a.v, a, T(-1)); }
  friend var operator*(const var& a, const var& b) { return record(a.v * b.v, a, b.v, b, a.v); }
  friend var operator/(const var& a, const var& b) {
    const T q = a.v / b.v;
    return record(q, a, T(1) / b.v, b, -q / b.v);
  }
  friend constexpr bool operator==(const var& a, const var& b) { return a.v == b.v; }
  friend constexpr auto operator<=>(const var& a, const var& b) { return a.v <=> b.v; }

  friend var exp(const var& a) {
    const T e = std::exp(a.v);
    return record(e, a, e);
  }
  friend var log(const var& a) { return record(std::log(a.v), a, T(1) / a.v); }
  friend var sqrt(const var& a) {
    const T r = std::sqrt(a.v);
    return record(r, a, r == T(0) ? T(0) : T(1) / (T(2) * r));  // 0 at 0, as dual's
  }
  friend var tanh(const var& a) {
    const T t = std::tanh(a.v);
    return record(t, a, T(1) - t * t);
  }
  friend var abs(const var& a) { return record(std::abs(a.v), a, a.v < T(0) ? T(-1) : T(1)); }
  friend var fabs(const var& a) { return abs(a); }
  friend var pow(const var& a, T p) { return record(std::pow(a.v, p), a, p * std::pow(a.v, p - T(1))); }
  friend var max(const var& a, const var& b) { return a.v >= b.v ? a : b; }
  friend var min(const var& a, const var& b) { return a.v <= b.v ? a : b; }
  friend bool isnan(const var& a) { return std::isnan(a.v); }
  friend bool isinf(const var& a) { return std::isinf(a.v); }

 private:
  /// The result of an operation on a and b, with ∂/∂a = da and ∂/∂b = db; on constants only, a constant.
  static var record(T value, const var& a, T da, const var& b = {}, T db = T(0));
};

/// This thread's record of the operations on vars since clear(). Node 0 stands for constants.
template <class T>
class tape {
 public:
  struct node {
    std::uint32_t a, b;  // operands (0: a constant)
    T da, db;            // the operation's partial derivatives with respect to them
  };
  struct learned_leaf {
    const void* address;  // the learnable (learnable.hpp) that became this leaf
    std::uint32_t id;
  };

  /// This thread's tape. Every recorded operation asks for it, so the fast path reads a
  /// constant-initialised thread_local pointer (no initialisation guard, unlike a local static).
  static tape& local() {
    if (tape* t = current_) [[likely]]
      return *t;
    return make_local();
  }

  void clear() {
    nodes_.assign(1, node{0, 0, T(0), T(0)});
    learned_.clear();
  }
  /// A new input: its derivative is read back by adjoint() after sweep().
  var<T> input(T value) { return {value, push({0, 0, T(0), T(0)})}; }
  /// An input that is the learnable at `address`: listed by learned() for the caller to map.
  var<T> learned_input(const void* address, T value) {
    const var<T> x = input(value);
    learned_.push_back({address, x.id});
    return x;
  }
  std::uint32_t push(const node& n) {
    nodes_.push_back(n);
    return std::uint32_t(nodes_.size() - 1);
  }

  /// Adjoints of every node from those of the outputs (seeds: node and d loss / d node; a
  /// constant's seed is dropped): one sweep over the nodes in reverse order. Inline: the backward
  /// sweeps a tape of a few nodes per score, where a call costs as much as the sweep.
  [[gnu::always_inline]] void sweep(std::span<const std::pair<std::uint32_t, T>> seeds) {
    adj_.assign(nodes_.size(), T(0));
    for (const auto& [id, d] : seeds) adj_[id] += d;
    adj_[0] = T(0);
    for (std::size_t n = nodes_.size(); n-- > 1;) {
      const T g = adj_[n];
      if (g == T(0)) continue;  // nothing flows back: skips 0 · inf at a kink
      const node& x = nodes_[n];
      adj_[x.a] += x.da * g;
      adj_[x.b] += x.db * g;
    }
  }
  [[gnu::always_inline]] void sweep(const var<T>& out, T seed) {
    const std::pair<std::uint32_t, T> one{out.id, seed};
    sweep(std::span(&one, 1));
  }
  /// d loss / d x after sweep(); 0 for a constant.
  T adjoint(const var<T>& x) const { return x.id ? adj_[x.id] : T(0); }
  T adjoint(std::uint32_t id) const { return id ? adj_[id] : T(0); }
  const std::vector<learned_leaf>& learned() const { return learned_; }

 private:
  tape() { clear(); }
  static tape& make_local() {
    thread_local tape t;
    current_ = &t;
    return t;
  }
  static inline thread_local tape* current_ = nullptr;
  std::vector<node> nodes_;
  std::vector<T> adj_;
  std::vector<learned_leaf> learned_;
};

template <class T>
inline var<T> var<T>::record(T value, const var& a, T da, const var& b, T db) {
  if ((a.id | b.id) == 0) return var(value);
  return {value, tape<T>::local().push({a.id, b.id, da, db})};
}

}  // namespace xattn
