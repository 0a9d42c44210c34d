#pragma once
// Recording a user's generic scoring code. xattn::recorded is a scalar type whose operations append
// nodes to this thread's record (program.hpp) while computing a value, so that calling a policy's
// operator()(q, k) on spans of it once gives its whole computation as data, for every (query,
// key) pair: the separation (separate.hpp) then finds what depends on the query only, on the key
// only, and the dot products of the two. The values are synthetic (fixed pseudo-random inputs,
// the learnables' actual values) and only decide branches.
//
// A branch (`if`, `?:`, `&&` on a comparison) follows the recorded values and records a guard:
// the condition and the way it went. The code found is valid for the pairs whose conditions go
// the same way; the kernel checks the guards and computes the other pairs by the policy itself.
// xattn::select(c, a, b) (select.hpp) records both sides instead, and needs no guard.
#include "program.hpp"

#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace xattn {

namespace record {

/// A policy's code recorded for one pair: inputs q[0, dq) then k[0, dk).
struct recording {
  program code;
  std::size_t dq = 0, dk = 0;
  std::uint32_t score = 0;
  std::vector<std::uint32_t> guards;  // conditions the recorded branches tested
  std::vector<std::uint8_t> expect;   // the way each went (1: true)
  std::vector<const void*> params;    // the learnable behind each param node's index
  std::unordered_map<const void*, std::uint32_t> param_index;
  bool escaped = false;  // a value was converted to double: what follows is not in the record

  std::uint32_t param(const void* address, double value) {
    const auto [it, added] = param_index.try_emplace(address, std::uint32_t(params.size()));
    if (added) params.push_back(address);
    return code.push({op::param, it->second, 0, 0, value});
  }
};

namespace detail {
inline recording*& current() {
  thread_local recording* r = nullptr;
  return r;
}
}  // namespace detail

/// This thread records into r while alive.
class scope {
 public:
  explicit scope(recording& r) : previous_(detail::current()) { detail::current() = &r; }
  ~scope() { detail::current() = previous_; }
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;

 private:
  recording* previous_;
};

/// The synthetic value of input slot n: spread over (-1, 1), never 0, the same every time.
inline double synthetic_input(std::size_t n) {
  std::uint64_t x = 0x9e3779b97f4a7c15ull * (n + 1);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  const double u = double(x >> 11) / double(1ull << 53);  // [0, 1)
  return (u < 0.5 ? -1 : 1) * (0.25 + 1.5 * std::abs(u - 0.5));
}

}  // namespace record

class recorded_bool;

/// A value of recorded code: its node and the value it had.
class recorded {
 public:
  recorded() : recorded(0.0) {}
  recorded(double value) : id_(constant(value)), v_(value) {}  // constants lift implicitly: `T s = 0`
  template <class U>
  requires std::is_arithmetic_v<U> &&(!std::is_same_v<U, double>)recorded(U value) : recorded(double(value)) {}

  /// Input slot n of the record.
  static recorded input(std::size_t n, double value) {
    return {here().code.push({record::op::input, std::uint32_t(n), 0, 0, 0}), value};
  }
  /// The learnable at `address`, holding `value`.
  static recorded param(const void* address, double value) { return {here().param(address, value), value}; }

  std::uint32_t id() const noexcept { return id_; }
  double value() const noexcept { return v_; }

  /// A value leaving the record (`std::sqrt(x)`, `double(x)`): the code compiles as it would on
  /// double, and the record says it is incomplete, so that the caller runs the policy itself.
  operator double() const {
    here().escaped = true;
    return v_;
  }

  recorded& operator+=(const recorded& o) { return *this = *this + o; }
  recorded& operator-=(const recorded& o) { return *this = *this - o; }
  recorded& operator*=(const recorded& o) { return *this = *this * o; }
  recorded& operator/=(const recorded& o) { return *this = *this / o; }

  friend recorded operator+(const recorded& a, const recorded& b) {
    if (is_constant(b, 0)) return a;  // x + 0 is x: what `T s = 0; s += ...` starts with
    if (is_constant(a, 0)) return b;
    return make(record::op::add, a.v_ + b.v_, a, b);
  }
  friend recorded operator-(const recorded& a, const recorded& b) {
    if (is_constant(b, 0)) return a;
    return make(record::op::sub, a.v_ - b.v_, a, b);
  }
  friend recorded operator-(const recorded& a) { return make(record::op::neg, -a.v_, a); }
  friend recorded operator*(const recorded& a, const recorded& b) {
    if (is_constant(b, 1)) return a;
    if (is_constant(a, 1)) return b;
    return make(record::op::mul, a.v_ * b.v_, a, b);
  }
  friend recorded operator/(const recorded& a, const recorded& b) {
    if (is_constant(b, 1)) return a;
    return make(record::op::div, a.v_ / b.v_, a, b);
  }

  friend recorded exp(const recorded& a) { return make(record::op::exp, std::exp(a.v_), a); }
  friend recorded log(const recorded& a) { return make(record::op::log, std::log(a.v_), a); }
  friend recorded sqrt(const recorded& a) { return make(record::op::sqrt, std::sqrt(a.v_), a); }
  friend recorded tanh(const recorded& a) { return make(record::op::tanh, std::tanh(a.v_), a); }
  friend recorded abs(const recorded& a) { return make(record::op::abs, std::abs(a.v_), a); }
  friend recorded fabs(const recorded& a) { return abs(a); }
  friend recorded pow(const recorded& a, double p) {
    recorded r = make(record::op::pow, std::pow(a.v_, p), a);
    here().code.code[r.id_].value = p;
    return r;
  }
  friend recorded max(const recorded& a, const recorded& b) {
    return make(record::op::max, a.v_ >= b.v_ ? a.v_ : b.v_, a, b);
  }
  friend recorded min(const recorded& a, const recorded& b) {
    return make(record::op::min, a.v_ <= b.v_ ? a.v_ : b.v_, a, b);
  }

  friend recorded_bool operator<(const recorded& a, const recorded& b);
  friend recorded_bool operator<=(const recorded& a, const recorded& b);
  friend recorded_bool operator>(const recorded& a, const recorded& b);
  friend recorded_bool operator>=(const recorded& a, const recorded& b);
  friend recorded_bool operator==(const recorded& a, const recorded& b);
  friend recorded_bool operator!=(const recorded& a, const recorded& b);
  friend recorded select(const recorded_bool& c, const recorded& a, const recorded& b);

 private:
  friend class recorded_bool;
  recorded(std::uint32_t id, double value) : id_(id), v_(value) {}

  static record::recording& here() { return *record::detail::current(); }
  static std::uint32_t constant(double value) { return here().code.push({record::op::constant, 0, 0, 0, value}); }
  static bool is_leaf_constant(const std::vector<record::node>& code, std::uint32_t id) {
    return code[id].o == record::op::constant;
  }
  static bool is_constant(const recorded& x, double value) {
    const record::node& n = here().code.code[x.id_];
    return n.o == record::op::constant && n.value == value;
  }
  /// A node of operation o on a (and b, c); on constants only, a constant.
  template <class... X>
  static recorded make(record::op o, double value, const X&... x) {
    auto& code = here().code.code;
    if ((is_leaf_constant(code, x.id_) && ...)) return recorded(value);
    const std::uint32_t ids[] = {x.id_..., 0, 0};
    return {here().code.push({o, ids[0], sizeof...(X) > 1 ? ids[1] : 0, sizeof...(X) > 2 ? ids[2] : 0, 0}), value};
  }

  std::uint32_t id_;
  double v_;
};

/// A recorded comparison. Testing it (`if`, `?:`, `!`, `&&`) records a guard and follows the
/// recorded value; xattn::select takes it as data.
class recorded_bool {
 public:
  explicit operator bool() const {
    record::recording& r = *record::detail::current();
    if (r.code.code[id_].o != record::op::constant) {  // a condition on constants holds everywhere
      r.guards.push_back(id_);
      r.expect.push_back(v_);
    }
    return v_;
  }
  std::uint32_t id() const noexcept { return id_; }
  bool value() const noexcept { return v_; }

  friend recorded_bool operator&&(const recorded_bool& a, const recorded_bool& b) {
    return make(record::op::land, a.v_ && b.v_, a.id_, b.id_);
  }
  friend recorded_bool operator||(const recorded_bool& a, const recorded_bool& b) {
    return make(record::op::lor, a.v_ || b.v_, a.id_, b.id_);
  }
  friend recorded_bool operator!(const recorded_bool& a) { return make(record::op::lnot, !a.v_, a.id_, 0); }

  static recorded_bool compare(record::op o, bool value, const recorded& a, const recorded& b) {
    return make(o, value, a.id_, b.id_);
  }

 private:
  recorded_bool(std::uint32_t id, bool value) : id_(id), v_(value) {}
  static recorded_bool make(record::op o, bool value, std::uint32_t a, std::uint32_t b) {
    auto& code = record::detail::current()->code;
    const bool constants =
        code.code[a].o == record::op::constant && (record::arity(o) == 1 || code.code[b].o == record::op::constant);
    if (constants) return {code.push({record::op::constant, 0, 0, 0, value ? 1.0 : 0.0}), value};
    return {code.push({o, a, b, 0, 0}), value};
  }
  std::uint32_t id_;
  bool v_;
};

inline recorded_bool operator<(const recorded& a, const recorded& b) {
  return recorded_bool::compare(record::op::lt, a.v_ < b.v_, a, b);
}
inline recorded_bool operator<=(const recorded& a, const recorded& b) {
  return recorded_bool::compare(record::op::le, a.v_ <= b.v_, a, b);
}
inline recorded_bool operator>(const recorded& a, const recorded& b) {
  return recorded_bool::compare(record::op::gt, a.v_ > b.v_, a, b);
}
inline recorded_bool operator>=(const recorded& a, const recorded& b) {
  return recorded_bool::compare(record::op::ge, a.v_ >= b.v_, a, b);
}
inline recorded_bool operator==(const recorded& a, const recorded& b) {
  return recorded_bool::compare(record::op::eq, a.v_ == b.v_, a, b);
}
inline recorded_bool operator!=(const recorded& a, const recorded& b) {
  return recorded_bool::compare(record::op::ne, a.v_ != b.v_, a, b);
}

// Mixed with numbers: exact matches, so that `x + 1.0` is not ambiguous with the built-in
// operators on double (reached through the conversion above).
template <class U>
concept recorded_number = std::is_arithmetic_v<U>;
template <recorded_number U>
recorded operator+(const recorded& a, U b) {
  return a + recorded(b);
}
template <recorded_number U>
recorded operator+(U a, const recorded& b) {
  return recorded(a) + b;
}
template <recorded_number U>
recorded operator-(const recorded& a, U b) {
  return a - recorded(b);
}
template <recorded_number U>
recorded operator-(U a, const recorded& b) {
  return recorded(a) - b;
}
template <recorded_number U>
recorded operator*(const recorded& a, U b) {
  return a * recorded(b);
}
template <recorded_number U>
recorded operator*(U a, const recorded& b) {
  return recorded(a) * b;
}
template <recorded_number U>
recorded operator/(const recorded& a, U b) {
  return a / recorded(b);
}
template <recorded_number U>
recorded operator/(U a, const recorded& b) {
  return recorded(a) / b;
}
template <recorded_number U>
recorded_bool operator<(const recorded& a, U b) {
  return a < recorded(b);
}
template <recorded_number U>
recorded_bool operator<(U a, const recorded& b) {
  return recorded(a) < b;
}
template <recorded_number U>
recorded_bool operator<=(const recorded& a, U b) {
  return a <= recorded(b);
}
template <recorded_number U>
recorded_bool operator<=(U a, const recorded& b) {
  return recorded(a) <= b;
}
template <recorded_number U>
recorded_bool operator>(const recorded& a, U b) {
  return a > recorded(b);
}
template <recorded_number U>
recorded_bool operator>(U a, const recorded& b) {
  return recorded(a) > b;
}
template <recorded_number U>
recorded_bool operator>=(const recorded& a, U b) {
  return a >= recorded(b);
}
template <recorded_number U>
recorded_bool operator>=(U a, const recorded& b) {
  return recorded(a) >= b;
}
template <recorded_number U>
recorded_bool operator==(const recorded& a, U b) {
  return a == recorded(b);
}
template <recorded_number U>
recorded_bool operator==(U a, const recorded& b) {
  return recorded(a) == b;
}
template <recorded_number U>
recorded_bool operator!=(const recorded& a, U b) {
  return a != recorded(b);
}
template <recorded_number U>
recorded_bool operator!=(U a, const recorded& b) {
  return recorded(a) != b;
}

inline recorded_bool isnan(const recorded& a) { return a != a; }
inline recorded_bool isinf(const recorded& a) { return abs(a) == recorded(HUGE_VAL); }

/// a where c holds, else b: both sides recorded, no guard.
inline recorded select(const recorded_bool& c, const recorded& a, const recorded& b) {
  auto& code = record::detail::current()->code;
  if (code.code[c.id()].o == record::op::constant) return code.code[c.id()].value != 0 ? a : b;
  return {code.push({record::op::select, c.id(), a.id_, b.id_, 0}), c.value() ? a.v_ : b.v_};
}

namespace record {

/// P's operator() recorded on queries of dq features and keys of dk.
template <class P>
recording record_score(const P& p, std::size_t dq, std::size_t dk) {
  recording r;
  r.dq = dq;
  r.dk = dk;
  r.code.inputs = dq + dk;
  const scope s(r);
  std::vector<recorded> q, k;
  q.reserve(dq);
  k.reserve(dk);
  for (std::size_t d = 0; d < dq; ++d) q.push_back(recorded::input(d, synthetic_input(d)));
  for (std::size_t d = 0; d < dk; ++d) k.push_back(recorded::input(dq + d, synthetic_input(dq + d)));
  const recorded out = recorded(p(std::span<const recorded>(q), std::span<const recorded>(k)));
  r.score = out.id();
  r.code.outputs.assign(1, r.score);
  return r;
}

}  // namespace record

}  // namespace xattn
