#pragma once
// Reverse mode over several pairs at once: var_lanes<T> is var<T> (var.hpp) with a value per SIMD
// lane, a (query, key) pair per lane. The backward runs a user policy's generic per-pair code on
// it once per batch of keys, so the tape holds one node per operation for all the lanes, where
// var<T> records and sweeps one tape per pair. Code that branches on a value must take the same
// branch in every lane: a comparison whose lanes disagree throws divergent_lanes, and the caller
// differentiates those pairs one by one on var<T> instead. The math functions are var's, lane by
// lane (xsimd's exp, log and tanh round differently from std's in the last bits).
#include "kernel/aligned.hpp"
#include "simd/wide.hpp"
#include "var.hpp"

#include <algorithm>
#include <array>
#include <compare>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn {

/// Thrown by a comparison of var_lanes whose lanes disagree: the code would branch differently.
struct divergent_lanes {};

template <class T>
class lane_tape;

template <class T>
struct var_lanes {
  // 64 bytes of lanes (16 floats or 8 doubles) whatever the ISA: fewer spread each node's
  // bookkeeping over fewer pairs, more make every node larger and lanes diverge more often
  using batch_type = simd::wide64<T>;
  batch_type v{};        // one value per lane
  std::uint32_t id = 0;  // the node that computed it; 0: a constant

  var_lanes() = default;
  var_lanes(T value) : v(value) {}  // constants lift implicitly: `T s = 0`
  template <class U>
  requires std::is_arithmetic_v<U> &&(!std::is_same_v<U, T>)var_lanes(U value) : v(T(value)) {}
  explicit var_lanes(const batch_type& value, std::uint32_t node = 0) : v(value), id(node) {}

  var_lanes& operator+=(const var_lanes& o) { return *this = *this + o; }
  var_lanes& operator-=(const var_lanes& o) { return *this = *this - o; }
  var_lanes& operator*=(const var_lanes& o) { return *this = *this * o; }
  var_lanes& operator/=(const var_lanes& o) { return *this = *this / o; }

  friend var_lanes operator+(const var_lanes& a, const var_lanes& b) { return record(a.v + b.v, a, one(), b, one()); }
  friend var_lanes operator-(const var_lanes& a, const var_lanes& b) {
    return record(a.v - b.v, a, one(), b, batch_type(T(-1)));
  }
  friend var_lanes operator-(const var_lanes& a) { return record(-a.v, a, batch_type(T(-1))); }
  friend var_lanes operator*(const var_lanes& a, const var_lanes& b) { return record(a.v * b.v, a, b.v, b, a.v); }
  friend var_lanes operator/(const var_lanes& a, const var_lanes& b) {
    const batch_type q = a.v / b.v;
    return record(q, a, one() / b.v, b, -q / b.v);
  }
  friend bool operator==(const var_lanes& a, const var_lanes& b) { return uniform(a.v == b.v); }
  friend bool operator!=(const var_lanes& a, const var_lanes& b) { return uniform(a.v != b.v); }
  friend bool operator<(const var_lanes& a, const var_lanes& b) { return uniform(a.v < b.v); }
  friend bool operator<=(const var_lanes& a, const var_lanes& b) { return uniform(a.v <= b.v); }
  friend bool operator>(const var_lanes& a, const var_lanes& b) { return uniform(a.v > b.v); }
  friend bool operator>=(const var_lanes& a, const var_lanes& b) { return uniform(a.v >= b.v); }
  friend std::partial_ordering operator<=>(const var_lanes& a, const var_lanes& b) {  // as var's, if every lane agrees
    if (a == b) return std::partial_ordering::equivalent;
    if (a < b) return std::partial_ordering::less;
    if (a > b) return std::partial_ordering::greater;
    return std::partial_ordering::unordered;  // a NaN in every lane
  }

  friend var_lanes exp(const var_lanes& a) {
    const batch_type e = exp(a.v);
    return record(e, a, e);
  }
  friend var_lanes log(const var_lanes& a) { return record(log(a.v), a, one() / a.v); }
  friend var_lanes sqrt(const var_lanes& a) {
    const batch_type r = sqrt(a.v);
    return record(r, a, select(r == batch_type(T(0)), batch_type(T(0)), one() / (batch_type(T(2)) * r)));  // 0 at 0
  }
  friend var_lanes tanh(const var_lanes& a) {
    const batch_type t = tanh(a.v);
    return record(t, a, one() - t * t);
  }
  friend var_lanes abs(const var_lanes& a) {
    return record(abs(a.v), a, select(a.v < batch_type(T(0)), batch_type(T(-1)), one()));
  }
  friend var_lanes fabs(const var_lanes& a) { return abs(a); }
  friend var_lanes pow(const var_lanes& a, T p) {
    return record(pow(a.v, batch_type(p)), a, batch_type(p) * pow(a.v, batch_type(p - T(1))));
  }
  friend var_lanes max(const var_lanes& a, const var_lanes& b) { return pick(a.v >= b.v, a, b); }  // ties: a
  friend var_lanes min(const var_lanes& a, const var_lanes& b) { return pick(a.v <= b.v, a, b); }
  friend bool isnan(const var_lanes& a) { return uniform(isnan(a.v)); }
  friend bool isinf(const var_lanes& a) { return uniform(isinf(a.v)); }

 private:
  static batch_type one() { return batch_type(T(1)); }
  template <class M>
  static bool uniform(const M& m) {
    if (all(m)) return true;
    if (none(m)) return false;
    throw divergent_lanes{};
  }
  /// a where m, else b: per lane, as var's max and min pick one operand.
  template <class M>
  static var_lanes pick(const M& m, const var_lanes& a, const var_lanes& b) {
    const batch_type da = select(m, one(), batch_type(T(0)));
    return record(select(m, a.v, b.v), a, da, b, one() - da);
  }
  static var_lanes record(const batch_type& value, const var_lanes& a, const batch_type& da, const var_lanes& b = {},
                          const batch_type& db = batch_type(T(0)));
};

/// The number of pairs a var_lanes<T> carries.
template <class T>
inline constexpr std::size_t lane_count = var_lanes<T>::batch_type::size;

/// This thread's record of the operations on var_lanes since clear(), as tape<T> (var.hpp) with
/// one partial derivative per lane. Nodes are stored flat (no per-node copies of lane arrays), and
/// the sweep runs batch by batch, in registers.
template <class T>
class lane_tape {
 public:
  using batch_type = typename var_lanes<T>::batch_type;
  static constexpr std::size_t lanes = batch_type::size, w = simd::width<T>;
  using learned_leaf = typename tape<T>::learned_leaf;

  /// This thread's tape (as tape<T>::local()).
  static lane_tape& local() {
    if (lane_tape* t = current_) [[likely]]
      return *t;
    return make_local();
  }

  void clear() {
    size_ = 1;  // node 0 stands for constants
    learned_.clear();
  }
  var_lanes<T> input(const batch_type& value) {
    const batch_type zero(T(0));
    return var_lanes<T>(value, push(zero, 0, zero, 0));
  }
  var_lanes<T> learned_input(const void* address, T value) {
    const var_lanes<T> x = input(batch_type(value));
    learned_.push_back({address, x.id});
    return x;
  }
  /// A node computed from nodes a and b with partial derivatives da and db.
  std::uint32_t push(const batch_type& da, std::uint32_t a, const batch_type& db, std::uint32_t b) {
    if (size_ >= operands_.size()) grow();
    operands_[size_] = {a, b};
    T* p = partials_.data() + size_ * 2 * lanes;
    da.store(p);
    db.store(p + lanes);
    return std::uint32_t(size_++);
  }

  /// Adjoints of every node from the output's (seed: d loss / d output per lane): a lane whose
  /// adjoint at a node is 0 passes nothing back through it, as tape<T>::sweep skips the node.
  void sweep(const var_lanes<T>& out, const batch_type& seed) {
    using B = simd::batch<T>;
    adj_.assign(size_ * lanes, T(0));
    if (out.id == 0) return;
    seed.store(adj_.data() + out.id * lanes);
    const B zero(T(0));
    for (std::size_t n = out.id; n > 0; --n) {
      const T* gp = adj_.data() + n * lanes;
      std::array<B, lanes / w> g;
      std::array<typename B::batch_bool_type, lanes / w> live;
      bool any = false;
      for (std::size_t i = 0; i < lanes / w; ++i) {
        g[i] = B::load_unaligned(gp + i * w);
        live[i] = g[i] != zero;
        any = any || xsimd::any(live[i]);
      }
      if (!any) continue;
      const auto [a, b] = operands_[n];
      const T* p = partials_.data() + n * 2 * lanes;
      for (const auto& [to, d] : {std::pair{a, p}, std::pair{b, p + lanes}}) {
        T* x = adj_.data() + to * lanes;
        for (std::size_t i = 0; i < lanes / w; ++i) {
          const B sum =
              B::load_unaligned(x + i * w) + xsimd::select(live[i], B::load_unaligned(d + i * w) * g[i], zero);
          sum.store_unaligned(x + i * w);
        }
      }
    }
  }
  batch_type adjoint(std::uint32_t id) const {
    return id ? batch_type::load(adj_.data() + id * lanes) : batch_type(T(0));
  }
  const std::vector<learned_leaf>& learned() const { return learned_; }

 private:
  lane_tape() { clear(); }
  static lane_tape& make_local() {
    thread_local lane_tape t;
    current_ = &t;
    return t;
  }
  void grow() {
    const std::size_t n = std::max<std::size_t>(256, 2 * size_);
    operands_.resize(n);
    partials_.resize(n * 2 * lanes);
  }
  static inline thread_local lane_tape* current_ = nullptr;
  std::size_t size_ = 1;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> operands_;  // node n's operands
  // On cache lines: every node's lanes are one line, and where the allocator left them straddling
  // two, each load and store of the sweep touched both.
  kernel::aligned_vector<T> partials_;  // node n's ∂/∂a, then ∂/∂b: 2 · lanes from 2n · lanes
  kernel::aligned_vector<T> adj_;       // node n's adjoint: lanes from n · lanes
  std::vector<learned_leaf> learned_;
};

template <class T>
inline var_lanes<T> var_lanes<T>::record(const batch_type& value, const var_lanes& a, const batch_type& da,
                                         const var_lanes& b, const batch_type& db) {
  if ((a.id | b.id) == 0) return var_lanes(value);
  return var_lanes(value, lane_tape<T>::local().push(da, a.id, db, b.id));
}

}  // namespace xattn

#pragma GCC diagnostic pop
