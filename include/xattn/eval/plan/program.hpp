#pragma once
// The loop nest as data: the steps a run executes, in order, with their nesting. One function per
// direction builds it from the resolved schedule and a path fact; the drivers and workers execute
// it step by step (a step they do not find is work they do not do), and xattn::explain prints the
// same list a line per step. So the nest is written down once, in the builders below.
#include "schedule.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace xattn {

enum class step : std::uint8_t {
  heading,  // a title line: no work
  // forward
  prepare_keys,    // the score path's keys, before the tasks (projected, packed into panels)
  tasks,           // loop: the schedule's tasks on its threads
  prefetch_next,   // the next task's rows queued (forward_schedule::prefetch_next)
  start_rows,      // the task's queries gathered (projected, scale folded), each row's softmax started
  key_blocks,      // loop: the task's key blocks, classified, hidden ones skipped
  scores,          // the block's score tile, by the score path
  modify_mask,     // modifiers; masks on partial blocks
  online_softmax,  // to base 2 (unless folded), running max and sum, accumulators rescaled; dropout after
  softmax_state,   // the running max and sum only (the weights' first pass)
  write_weights,   // 2^(s − m) / l, dropout, written (the weights' second pass)
  write_scores,    // the block's scores written, −inf where excluded
  values,          // P·V by the value reader
  finalize,        // O / l and each row's log-sum-exp written
  merge_chunks,    // loop: a decoding split's chunks merged by log-sum-exp
  // backward
  row_deltas,      // loop: Δ = rowsum(dO ∘ O), each row's shift, its dQ partials zeroed
  prepare_rows,    // loop: the score path's rows (features), before the tasks
  load_block,      // the task's value panel and keys; dK, dV zeroed
  query_blocks,    // loop: the query blocks of the group's heads, classified, trimmed, in turn
  plain_tile,      // a tile nothing hides, of whole batches, its rows' lse their own: the epilogues
  general_tile,    // any other tile: S, modifiers, masks, P, dropout, dV, dP, dS row by row
  tile_gradients,  // dS into dQ, dK and the path's other gradients
  store_block,     // dK, dV rows written
  reduce_rows,     // loop: dQ partials summed in chunk order; the path's row partials
  finish_rows,     // the score path's own last step (back through its projections, its parameters)
};

/// Which of a pass's key-block loops a key_blocks step is (explain's words and the classification).
enum class block_pass : std::uint8_t { output, state, weights, scores };

struct program_step {
  step kind = step::heading;
  std::uint8_t depth = 0;
  bool loop = false;  // the deeper steps that follow are its body
  block_pass pass = block_pass::output;
};

/// A loop nest of at most 24 steps, without allocation (a decoding step builds one per call).
class program {
 public:
  static constexpr std::size_t capacity = 24;

  program& add(step k, int depth, bool loop = false, block_pass pass = block_pass::output) {
    if (n_ == capacity) throw std::logic_error("xattn: program: more than 24 steps");
    steps_[n_++] = {k, std::uint8_t(depth), loop, pass};
    return *this;
  }
  std::size_t size() const noexcept { return n_; }
  const program_step& operator[](std::size_t i) const noexcept { return steps_[i]; }
  const program_step* begin() const noexcept { return steps_.data(); }
  const program_step* end() const noexcept { return steps_.data() + n_; }

  /// One past the last step of the body of the loop at i (the steps deeper than it that follow).
  std::size_t body_end(std::size_t i) const noexcept {
    std::size_t e = i + 1;
    while (e < n_ && steps_[e].depth > steps_[i].depth) ++e;
    return e;
  }
  /// Whether the steps [first, last) include kind k.
  bool has(step k, std::size_t first = 0, std::size_t last = capacity) const noexcept {
    for (std::size_t i = first; i < n_ && i < last; ++i)
      if (steps_[i].kind == k) return true;
    return false;
  }
  /// The first step of kind k at or after first (size() if none).
  std::size_t find(step k, std::size_t first = 0) const noexcept {
    while (first < n_ && steps_[first].kind != k) ++first;
    return first;
  }
  /// A copy without the steps of kind k (a test's way of showing the workers run what is listed).
  program without(step k) const {
    program p;
    for (const program_step& s : *this)
      if (s.kind != k) p.steps_[p.n_++] = s;
    return p;
  }

 private:
  std::array<program_step, capacity> steps_{};
  std::size_t n_ = 0;
};

/// The forward's nest for schedule fs; key_work: the score path prepares its keys before the tasks
/// (Path::key_work; panels of keys are prepared there too).
inline program forward_program(const forward_schedule& fs, bool key_work) {
  program g;
  g.add(step::heading, 0);
  if (key_work || fs.keys == key_reads::panels) g.add(step::prepare_keys, 1, true);
  g.add(step::tasks, 1, true);
  if (fs.prefetch_next && fs.key_chunks == 1 && fs.kind == pass_kind::attention) g.add(step::prefetch_next, 2);
  g.add(step::start_rows, 2);
  const auto blocks = [&](block_pass pass, step last) {
    g.add(step::key_blocks, 2, true, pass).add(step::scores, 3).add(step::modify_mask, 3).add(last, 3);
  };
  switch (fs.kind) {
    case pass_kind::attention:
      blocks(block_pass::output, step::online_softmax);
      g.add(step::values, 3).add(step::finalize, 2);
      if (fs.key_chunks > 1) g.add(step::merge_chunks, 1, true);
      break;
    case pass_kind::weights:
      blocks(block_pass::state, step::softmax_state);
      blocks(block_pass::weights, step::write_weights);
      break;
    case pass_kind::scores:
      blocks(block_pass::scores, step::write_scores);
      break;
  }
  return g;
}

/// The backward's nest for schedule bs; prepare_rows: the score path takes queries and keys to
/// their features before the tasks; general_tiles: some tile may not be plain (a mask, a partial
/// batch of keys, modifiers or dropout, or a row whose log-sum-exp is not its own: the run knows,
/// explain assumes none).
inline program backward_program(const backward_schedule& bs, bool prepare_rows, bool general_tiles) {
  program g;
  g.add(step::heading, 0).add(step::heading, 1).add(step::heading, 0);
  // the path's rows first: the deltas' loop ends in a barrier, after which every task may read them
  if (prepare_rows) g.add(step::prepare_rows, 1, true);
  g.add(step::row_deltas, 1, true);
  g.add(step::tasks, 1, true).add(step::load_block, 2).add(step::query_blocks, 2, true);
  if (bs.fused_epilogues) g.add(step::plain_tile, 3);
  if (general_tiles || !bs.fused_epilogues) g.add(step::general_tile, 3);
  g.add(step::tile_gradients, 3).add(step::store_block, 2);
  g.add(step::reduce_rows, 1, true).add(step::finish_rows, 1);
  return g;
}

}  // namespace xattn
