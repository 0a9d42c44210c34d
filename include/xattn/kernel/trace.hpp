#pragma once
// A recording mode for tests: which tile operations a run actually executed, and in which order on
// each thread, so that what explain says can be checked against what ran. A translation unit turns it on by defining
// XATTN_TRACE_TILE_OPS before including any xattn header (every translation unit of one program
// must agree); otherwise note() is an empty inline function and costs nothing.
#include "tile_format.hpp"

#include <cstddef>
#include <string>
#include <string_view>

#ifdef XATTN_TRACE_TILE_OPS
#include <algorithm>
#include <map>
#include <mutex>
#include <thread>
#include <vector>
#endif

namespace xattn::kernel {

/// The named steps of the forward and backward tiles: the kernel's tile operations, and the score
/// paths' own per-pair, per-row and tensor steps. The products and packs are each one operation
/// for every format (tile_op::format); the other steps work on the accumulator's rows only.
enum class operation : unsigned {
  pack_kt,                    // keys into a panel of strips (of feature pairs, for bf16_pairs)
  pack_strips,                // rows into strips (values, the backward's right operands; key pairs for bf16_pairs)
  qk_tile,                    // S = Q·Kᵀ against a panel
  qk_direct,                  // S = Q·Kᵀ reading key rows in place
  pv_tile,                    // O += P·V reading value rows in place
  pv_tile_strips,             // O += P·V against values in strips (the backward's dQ += dS·K too)
  pv_tile_transposed_strips,  // O += Pᵀ·X against rows in strips (the backward's dV and dK)
  probs_epilogue,             // P from the score product's registers (whole tiles of plain products)
  softmax_grad_epilogue,      // dS from dP's product's registers (the same tiles)
  probs_row,                  // P from a finished score row
  softmax_grad_row,           // dS from a finished dP row
  merge_row,                  // a row's parts over key chunks merged by log-sum-exp
  pair_scores,                // a score per (query, key) pair by the policy's code
  pair_gradients,             // the gradients of those scores, pair by pair (or on lanes of keys)
  tensor_scores,              // scores read from the tensor X
  tensor_gradients,           // dS written into X's gradient
  project_rows,               // rows projected to a policy's features and terms
  project_back,               // gradients at features taken back through the projections
  pair_program,               // a separated score's per-pair remainder, on lanes of a tile row
  pair_program_gradients,     // its reverse: the gradients at the product, the rows' scalars, parameters
  count
};

inline constexpr std::string_view operation_names[std::size_t(operation::count)] = {"pack_kt",
                                                                                    "pack_strips",
                                                                                    "qk_tile",
                                                                                    "qk_direct",
                                                                                    "pv_tile",
                                                                                    "pv_tile_strips",
                                                                                    "pv_tile_transposed_strips",
                                                                                    "probs_epilogue",
                                                                                    "softmax_grad_epilogue",
                                                                                    "probs_row",
                                                                                    "softmax_grad_row",
                                                                                    "merge_row",
                                                                                    "pair_scores",
                                                                                    "pair_gradients",
                                                                                    "tensor_scores",
                                                                                    "tensor_gradients",
                                                                                    "project_rows",
                                                                                    "project_back",
                                                                                    "pair_program",
                                                                                    "pair_program_gradients"};

/// One operation on tiles of one format (tile_format.hpp): qk_direct on float rows, on int8
/// (q8_0) rows, on bf16 pairs, ... The format is empty for the steps on accumulator rows alone.
struct tile_op {
  operation op = operation::count;
  std::string_view format{};

  friend constexpr bool operator==(const tile_op&, const tile_op&) = default;
  friend constexpr auto operator<=>(const tile_op&, const tile_op&) = default;
};

/// op on tiles of format_of<R>().
template <class R>
constexpr tile_op op_on(operation op) noexcept {
  return {op, format_of<R>()};
}

/// "qk_direct[q8_0]", or "merge_row" for a step without a format.
inline std::string name_of(tile_op t) {
  if (t.op >= operation::count) return "none";
  std::string s(operation_names[std::size_t(t.op)]);
  if (!t.format.empty()) s += "[" + std::string(t.format) + "]";
  return s;
}

#ifdef XATTN_TRACE_TILE_OPS
inline constexpr bool tracing = true;
#else
inline constexpr bool tracing = false;
#endif

namespace trace {

#ifdef XATTN_TRACE_TILE_OPS
struct record {
  std::mutex m;
  std::map<std::thread::id, std::vector<tile_op>> by_thread;  // in order; a repeat of the last op not kept
};
inline record& recording() {
  static record r;
  return r;
}

/// Records that op ran (any thread).
inline void note(tile_op op) {
  record& r = recording();
  const std::lock_guard<std::mutex> lock(r.m);
  auto& mine = r.by_thread[std::this_thread::get_id()];
  if (mine.empty() || mine.back() != op) mine.push_back(op);
}

/// Forgets everything recorded.
inline void clear() {
  record& r = recording();
  const std::lock_guard<std::mutex> lock(r.m);
  r.by_thread.clear();
}

/// The operations recorded since the last clear(), sorted.
inline std::vector<tile_op> recorded() {
  record& r = recording();
  const std::lock_guard<std::mutex> lock(r.m);
  std::vector<tile_op> v;
  for (const auto& [id, ops] : r.by_thread) v.insert(v.end(), ops.begin(), ops.end());
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

/// Each thread's operations since the last clear(), in the order it ran them (an operation run
/// several times in a row listed once).
inline std::vector<std::vector<tile_op>> sequences() {
  record& r = recording();
  const std::lock_guard<std::mutex> lock(r.m);
  std::vector<std::vector<tile_op>> v;
  for (const auto& [id, ops] : r.by_thread) v.push_back(ops);
  return v;
}
#else
/// Nothing: the recording is compiled only where XATTN_TRACE_TILE_OPS is defined.
inline void note(tile_op) {}
#endif

}  // namespace trace

}  // namespace xattn::kernel
