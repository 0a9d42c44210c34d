#pragma once
// What separation (separate.hpp) gives: a policy's score cut into a program per query row, per key
// row and per (query, key) pair, with the product of the rows' features between them.
#include "linear.hpp"
#include "program.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xattn::record {

/// A separated score. The query program maps a query row (inputs: its dq values) to outputs
/// [fq_0 .. fq_n) then its scalars; the key program a key row likewise to [fk_0 .. fk_n) then its
/// scalars. The pair program's inputs are slot 0, Σ fq_g fk_g, then the query's scalars, then the
/// key's; its outputs are the score, then the guards' conditions (expect[g]: the value under which
/// the separated code is the policy's).
struct separated {
  program query, key, pair;
  std::size_t features = 0, query_scalars = 0, key_scalars = 0;
  std::vector<std::uint8_t> expect;
  std::vector<const void*> params;  // the learnable behind each param node's index
  bool by_key = true;               // features grouped by the key's factors (else the query's)
  // A sum over features of one small per-feature body, Σ_g map(a_g(q), b_g(k)) (an L1 distance:
  // Σ_d |q_d − k_d|): map's inputs are map_query values of the query's feature g then map_key of
  // the key's; the query and key programs output them after their scalars, feature by feature;
  // the pair program reads the sum as its last input.
  program map;
  std::size_t map_features = 0, map_query = 0, map_key = 0;
  // The row programs' outputs that are linear in the row (linear.hpp): one product per block of rows.
  linear_split query_linear, key_linear;
  // Conditions on one row under which the separated code is the policy's: the row's scalar at
  // `scalar` is 1 or 0 as `expect` says, else every pair of that row is scored by the policy.
  struct row_guard {
    std::size_t scalar = 0;
    bool expect = true;
  };
  std::vector<row_guard> query_guards, key_guards;

  /// Whether the score is the product Σ fq·fk itself: no per-pair code, no pair guards.
  bool product_only() const noexcept {
    return features > 0 && map_features == 0 && expect.empty() && pair.outputs.size() == 1 &&
           pair.code[pair.outputs[0]].o == op::input && pair.code[pair.outputs[0]].a == 0;
  }
  /// Whether some pairs may be scored by the policy itself (a pair or row guard).
  bool guarded() const noexcept { return !expect.empty() || !query_guards.empty() || !key_guards.empty(); }
};

/// The outcome: separated, or why not. A recording that does not separate but holds the whole
/// code (no value left it) runs pair by pair on lanes: then `lanes` holds and parts.pair is the
/// recording itself (inputs q[0, dq) then k[0, dk); outputs the score, then the guards'
/// conditions, parts.expect their recorded values), parts.params its learnables.
struct separation {
  bool ok = false;
  bool lanes = false;
  std::string reason;
  separated parts;
};

}  // namespace xattn::record
