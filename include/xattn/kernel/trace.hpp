#pragma once
// A recording mode for tests: which tile operations a run actually executed, so that what explain
// says can be checked against what ran. A translation unit turns it on by defining
// XATTN_TRACE_TILE_OPS before including any xattn header (every translation unit of one program
// must agree); otherwise note() is an empty inline function and costs nothing.
#include <array>
#include <atomic>
#include <cstddef>
#include <string_view>
#include <vector>

namespace xattn::kernel {

/// The named steps of the forward and backward tiles: the kernel's tile operations, and the score
/// paths' own per-pair, per-row and tensor steps.
enum class tile_op : unsigned {
  pack_kt,                    // keys into a panel of strips
  pack_kt_pairs,              // keys into a panel of bf16 feature pairs
  pack_strips,                // rows into strips (values, and the backward's right operands)
  pack_v_pairs,               // bf16 values in key pairs
  qk_tile,                    // S = Q·Kᵀ against a panel
  qk_direct,                  // S = Q·Kᵀ reading key rows in place
  qk_tile_pairs,              // S = Q·Kᵀ of bf16 operands by vdpbf16ps against a panel
  qk_direct_pairs,            // the same reading key rows in place
  qk_direct_q8,               // S = Q·Kᵀ against int8 (q8_0) key rows in place, by integer products
  pv_tile,                    // O += P·V reading value rows in place
  pv_tile_strips,             // O += P·V against values in strips (the backward's dQ += dS·K too)
  pv_tile_pairs,              // O += P·V of bf16 probabilities and values by vdpbf16ps
  pv_tile_q8,                 // O += P·V dequantizing int8 (q8_0) value rows as they are loaded
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

inline constexpr std::array<std::string_view, std::size_t(tile_op::count)> tile_op_names = {"pack_kt",
                                                                                            "pack_kt_pairs",
                                                                                            "pack_strips",
                                                                                            "pack_v_pairs",
                                                                                            "qk_tile",
                                                                                            "qk_direct",
                                                                                            "qk_tile_pairs",
                                                                                            "qk_direct_pairs",
                                                                                            "qk_direct_q8",
                                                                                            "pv_tile",
                                                                                            "pv_tile_strips",
                                                                                            "pv_tile_pairs",
                                                                                            "pv_tile_q8",
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

constexpr std::string_view name_of(tile_op op) noexcept { return tile_op_names[std::size_t(op)]; }

#ifdef XATTN_TRACE_TILE_OPS
inline constexpr bool tracing = true;
#else
inline constexpr bool tracing = false;
#endif

namespace trace {

inline std::array<std::atomic<bool>, std::size_t(tile_op::count)>& seen() noexcept {
  static std::array<std::atomic<bool>, std::size_t(tile_op::count)> s{};
  return s;
}

/// Records that op ran (any thread; nothing when tracing is off).
inline void note(tile_op op) noexcept {
  if constexpr (tracing) seen()[std::size_t(op)].store(true, std::memory_order_relaxed);
}

/// Forgets everything recorded.
inline void clear() noexcept {
  for (auto& s : seen()) s.store(false, std::memory_order_relaxed);
}

/// The operations recorded since the last clear(), in tile_op order.
inline std::vector<tile_op> recorded() {
  std::vector<tile_op> r;
  for (std::size_t k = 0; k < seen().size(); ++k)
    if (seen()[k].load(std::memory_order_relaxed)) r.push_back(tile_op(k));
  return r;
}

}  // namespace trace

}  // namespace xattn::kernel
