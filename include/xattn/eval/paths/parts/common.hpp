#pragma once
// What every score path shares: where the backward writes the operands' gradients, the facts of a
// path that scores by the microkernels, and the named steps a path runs (explain prints them; the
// tracing tests check them against what ran).
#include "../../../kernel/blocking.hpp"
#include "../../../kernel/trace.hpp"
#include "../../../layout.hpp"
#include "../../plan/schedule.hpp"

#include <array>
#include <cstddef>
#include <initializer_list>

namespace xattn {

/// Where the backward writes, in kernel coordinates: dQ (B, Hq, Sq, Dq), dK (B, Hkv, Skv, Dk), for
/// a sum of products also the second term's dQ2 and dK2, or for scores given as a tensor X, dX
/// (B, Hq, Sq, Skv). A view of what the base does not have is empty.
template <class Acc>
struct gradient_targets {
  strided_view<Acc> dq{}, dk{}, dx{}, dq2{}, dk2{};
};

/// The facts of a path scoring rows of n features in Acc by the microkernels.
template <class Acc>
path_facts dot_facts(std::size_t n) {
  path_facts f;
  f.dot_product = true;
  f.width = n;
  f.acc_bytes = sizeof(Acc);
  f.lanes = simd::width<Acc>;
  f.strip = kernel::strip_width<Acc>;
  return f;
}

/// The facts of a path scoring pair by pair (or reading a tensor): no panels.
template <class Acc>
path_facts pair_facts(std::size_t n) {
  path_facts f = dot_facts<Acc>(n);
  f.dot_product = false;
  return f;
}

/// A short list of steps, by name.
struct op_list {
  std::array<kernel::tile_op, 6> ops{};
  std::size_t size = 0;
  constexpr op_list() = default;
  constexpr op_list(std::initializer_list<kernel::tile_op> l) {
    for (kernel::tile_op op : l) ops[size++] = op;
  }
  constexpr const kernel::tile_op* begin() const noexcept { return ops.data(); }
  constexpr const kernel::tile_op* end() const noexcept { return ops.data() + size; }
  constexpr bool empty() const noexcept { return size == 0; }
};

/// The steps of a path's backward: once per evaluation before the tasks, per key block, per tile
/// for the score before modifiers, per tile from dS, and once after the tasks.
struct backward_steps {
  op_list prepare, keys, scores, gradients, finish;
};

/// The backward steps of a product of rows in Acc (parts/dot_grads.hpp): keys into a panel and
/// strips, S by the score microkernel, dQ and dK by the P·V microkernel on strips.
template <class Acc>
constexpr backward_steps row_product_steps(op_list prepare = {}, kernel::tile_op also_scores = {},
                                           kernel::tile_op also_gradients = {}, op_list finish = {}) {
  using kernel::operation;
  const kernel::tile_op pack = kernel::op_on<Acc>(operation::pack_kt),
                        strips = kernel::op_on<Acc>(operation::pack_strips),
                        qk = kernel::op_on<Acc>(operation::qk_tile),
                        dk = kernel::op_on<Acc>(operation::pv_tile_transposed_strips),
                        dq = kernel::op_on<Acc>(operation::pv_tile_strips);
  const bool s = also_scores.op != operation::count, g = also_gradients.op != operation::count;
  return {prepare,
          {pack, strips},
          s ? op_list{qk, also_scores} : op_list{qk},
          g ? op_list{also_gradients, strips, dk, dq} : op_list{strips, dk, dq},
          finish};
}

}  // namespace xattn
