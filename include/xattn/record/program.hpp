#pragma once
// Straight-line code of scalar operations: what recording a user's generic code gives
// (recorded.hpp), and what the separation (separate.hpp) cuts it into -- a program per query row,
// per key row and per (query, key) pair. The lane machine (machine.hpp) runs a program on many
// rows or pairs at once, forward and in reverse. A node's operands are earlier nodes, so the code
// is in topological order by construction.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace xattn::record {

enum class op : std::uint8_t {
  input,     // the program's input slot a
  constant,  // value
  param,     // learnable a of the record (value: its value when recorded)
  add,
  sub,
  mul,
  div,
  neg,
  exp,
  log,
  sqrt,
  tanh,
  abs,
  pow,  // a to the constant power value
  max,
  min,
  lt,  // comparisons and logic: 1 where true, else 0
  le,
  gt,
  ge,
  eq,
  ne,
  land,
  lor,
  lnot,
  select,  // a ? b : c
};

/// The number of operands of o.
constexpr int arity(op o) noexcept {
  switch (o) {
    case op::input:
    case op::constant:
    case op::param:
      return 0;
    case op::neg:
    case op::exp:
    case op::log:
    case op::sqrt:
    case op::tanh:
    case op::abs:
    case op::pow:
    case op::lnot:
      return 1;
    case op::select:
      return 3;
    default:
      return 2;
  }
}

/// Whether o gives a truth value (no derivative flows through it).
constexpr bool is_logical(op o) noexcept { return o >= op::lt && o <= op::lnot; }

constexpr std::string_view name_of(op o) noexcept {
  constexpr std::string_view names[] = {"input", "constant", "param", "add", "sub", "mul", "div", "neg",   "exp",
                                        "log",   "sqrt",     "tanh",  "abs", "pow", "max", "min", "lt",    "le",
                                        "gt",    "ge",       "eq",    "ne",  "and", "or",  "not", "select"};
  return names[std::size_t(o)];
}

struct node {
  op o = op::constant;
  std::uint32_t a = 0, b = 0, c = 0;  // operands (earlier nodes), or input slot / parameter index
  double value = 0;                   // a constant's value, pow's exponent, a parameter's value
};

/// Code and the nodes it computes for its caller.
struct program {
  std::vector<node> code;
  std::vector<std::uint32_t> outputs;
  std::size_t inputs = 0;  // input slots [0, inputs)

  std::uint32_t push(const node& n) {
    code.push_back(n);
    return std::uint32_t(code.size() - 1);
  }
  std::size_t size() const noexcept { return code.size(); }
  /// The number of operations that are not leaves (what runs per row or pair).
  std::size_t operations() const noexcept {
    std::size_t n = 0;
    for (const node& x : code) n += arity(x.o) > 0;
    return n;
  }
};

}  // namespace xattn::record
