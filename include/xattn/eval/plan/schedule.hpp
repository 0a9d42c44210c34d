#pragma once
// Every "how" decision of a run, forward and backward, made in one function (resolve_schedule)
// from the user's schedule, the sizes, the facts of the plan (its score path, its values, its
// modifiers and dropout) and the machine. The workers and drivers only read the value it returns;
// xattn::explain prints it.
#include "../../policy/problem.hpp"
#include "../../round_up.hpp"
#include "../../schedule.hpp"

#include <unistd.h>
#include <cstddef>
#include <string>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace xattn {

/// The facts about this machine that the schedule depends on.
struct machine {
  std::size_t l2_bytes = std::size_t(1) << 20;  // per core
  int max_threads = 1;                          // OpenMP's default team size
  bool openmp = false;                          // built with OpenMP

  static machine here() {
    machine m;
    static const std::size_t l2 = [] {
      const long b = sysconf(_SC_LEVEL2_CACHE_SIZE);
      return b > 0 ? std::size_t(b) : std::size_t(1) << 20;
    }();
    m.l2_bytes = l2;
#ifdef _OPENMP
    m.max_threads = omp_get_max_threads();
    m.openmp = true;
#endif
    return m;
  }
  /// Bytes of the last-level cache (L3, else L2; 32 MiB when unknown).
  static std::size_t last_level_cache() {
    static const std::size_t llc = [] {
      long b = sysconf(_SC_LEVEL3_CACHE_SIZE);
      if (b <= 0) b = sysconf(_SC_LEVEL2_CACHE_SIZE);
      return b > 0 ? std::size_t(b) : std::size_t(32) << 20;
    }();
    return llc;
  }
};

/// What a score path tells the schedule (its static facts(base, problem)).
struct path_facts {
  bool dot_product = false;        // scores by the qk microkernel: keys packed into panels, or read in place
  bool keys_in_place_ok = false;   // the key rows (or features) are contiguous and may be read where they lie
  bool plain_products = false;     // a score is scale · (Q·Kᵀ) and nothing else (no terms, no per-pair code)
  bool query_grads_dense = false;  // the rows dQ accumulates into are row-major (B, Hq, Sq, n)
  std::size_t width = 0;           // features per query and key in the score product (n)
  std::size_t query_width = 0;     // features of the rows dQ accumulates into (0: width)
  std::size_t acc_bytes = 4;       // size of the accumulator type
  std::size_t lanes = 16;          // SIMD lanes of the accumulator type
  std::size_t strip = 64;          // columns of one register block of the P·V microkernel (kernel::strip_width)
};

/// What the values V tell the schedule.
struct value_facts {
  bool bf16_pairs = false;   // P·V may run on vdpbf16ps (bfloat16 V, float sums, a build with AVX512-BF16)
  bool in_place_ok = false;  // V's rows may be read where they lie (Acc or widened in registers, contiguous rows)
  bool same_type = true;     // V holds the accumulator type
};

/// Everything about a plan the schedule depends on besides its sizes.
struct plan_facts {
  path_facts path;
  value_facts values;
  bool modifiers = false;  // score modifiers follow the base score
  bool dropout = false;    // dropout on the weights
};

/// What the run computes: the attention output, the weights, or the scores.
enum class pass_kind { attention, weights, scores };

/// How a dot-product path reads its keys: packed into panels once per evaluation, packed per
/// (batch, kv head) by the thread that needs them, or scored where they lie. none: the path has no
/// panels (per-pair and tensor scores).
enum class key_reads { none, panels, per_head, in_place };

/// How the forward reads V: packed into strips once per head and thread; packed in key pairs for
/// vdpbf16ps; when decoding, in place (Acc, or 16-bit widened in registers), widened into a copy
/// of the head once per thread, or copied into a tile per task (Acc in another layout).
enum class value_reads { strips, bf16_pairs, in_place, widened_per_head, copied_per_task };

/// The forward pass's decisions.
struct forward_schedule {
  pass_kind kind = pass_kind::attention;
  std::size_t block_q = 0, block_k = 0;  // block_k in whole SIMD batches
  int threads = 1;
  std::size_t q_blocks = 0;    // per (batch, head)
  std::size_t key_chunks = 1;  // > 1: keys split into chunks merged by log-sum-exp
  std::size_t chunk_keys = 0;  // keys per chunk (whole blocks)
  bool decoding = false;       // at most max_decode_rows query rows per key head: bound by reading K and V
  key_reads keys = key_reads::none;
  value_reads values = value_reads::strips;
  std::size_t group_rows = 0;  // > 0: grouped-query decoding, the group's query heads as one task's rows
  bool prefetch_next = false;  // a task prefetches the next task's rows (and the next head's keys and values)
  std::size_t tasks = 0;       // B · Hq · q_blocks · key_chunks (grouped rows: B · Hkv · key_chunks)
  double flop = 0;             // 2 · B · Hq · Sq · Skv · (n + Dv)
  std::string threads_reason;  // why this many threads
};

/// The backward pass's decisions: a task per key block of a key head, every query block of the
/// heads that read it walked in order.
struct backward_schedule {
  std::size_t block_q = 0, block_k = 0;
  int threads = 1;
  std::size_t key_chunks = 1, chunk_keys = 0;  // dQ gathers one partial per chunk, summed in chunk order
  std::size_t tasks = 0;         // B · Hkv · key_chunks · blocks per chunk (slots past a short last chunk idle)
  std::size_t heads = 0;         // B · Hkv
  std::size_t group = 1;         // streams (chunk, head) handed out together: the thread count
  bool dq_in_place = false;      // one chunk and dense rows: dQ accumulates in its result, no partials
  bool fused_epilogues = false;  // tiles of plain products take P and dS from the products' epilogues
  double flop = 0;               // 2 · B · Hq · Sq · Skv · (3n + 2Dv): S, dQ, dK and dP, dV
  std::string threads_reason;
  // The forward pass that recomputes the statistics of rows whose log-sum-exp is too large for the
  // accumulator to resolve a probability (a row of d2l's -1e6 fills): the scores pass's schedule.
  forward_schedule rescan;
};

/// Both directions' decisions for one problem: what a run, and explain, read.
struct resolved_schedule {
  forward_schedule forward;
  backward_schedule backward;  // empty (tasks 0) unless the pass is an attention
};

/// The schedule a run uses, both directions (schedule_rules.hpp). Its rules, decision by
/// decision, are docs/design.md's "The resolved schedule"; what they give for a long causal
/// sequence (forward and backward), a policy scored pair by pair, a grouped-query decoding step
/// and an encoder batch is what explain prints there, quoted from tests/data/explain/, which
/// tests/eval/entry/test_trace.cpp compares with explain.
#ifdef XATTN_PRECOMPILED_KERNELS
resolved_schedule resolve_schedule(const schedule& requested, const problem& pr, const plan_facts& facts,
                                   pass_kind kind, const machine& m = machine::here());
#endif

}  // namespace xattn

// The rules themselves: compiled once into libxattn_kernels when the program links it, else inline.
#ifndef XATTN_PRECOMPILED_KERNELS
#include "schedule_rules.hpp"
#endif
