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

/// The schedule a run uses, both directions.
///
/// Forward:
///  - threads: a count the user sets is used as given; 0 means OpenMP's default, or one thread when
///    the work is below serial_below_flop (default 2^22 flop: waking a team costs more).
///  - block_k: 512 keys, halved (down to 64) until one key block's packed keys and values,
///    block_k · (n + Dv) elements, fit in L2 -- the next block's keys then stream in beside them.
///    Larger blocks pay the per-block costs (rescaling O, block sums, classification) less often.
///  - block_q: 60 query rows, or all of a head's queries when Sq is at most 128 and Sq x block_k
///    at most 60 x 512 (short sequences: a task per head); with fewer than 4 tasks per thread,
///    6 rows fewer at a time so the hand-out can balance (block_q never changes a result bit).
///  - keys packed into panels: once per evaluation, or, when one head's panels take less than a
///    quarter of L2, per head by the thread whose task needs it (then still in its L2 when used).
///  - decoding (at most 16 query rows per key head): keys scored in place, not packed; with no more
///    than 16 query rows and at least 2048 keys, the keys split into up to 8 chunks of whole blocks
///    (at least 1024 keys each) merged by log-sum-exp. The split depends only on the shape, never on
///    the thread count, so results stay bitwise identical across thread counts. With grouped
///    queries, one task takes the group's query heads as the rows of one tile.
///  - values: packed in strips per head and thread (in key pairs for vdpbf16ps when bfloat16);
///    read in place when the keys are packed per head and V holds contiguous rows of the
///    accumulator type (a short head's values stay in L2 for its few query blocks); when decoding,
///    read in place when they can be, else converted.
///  - prefetch_next: when keys are packed per head (short sequences), each task prefetches the
///    query and output rows of the thread's next task, and a head's first task the keys and values
///    of the next head, a few lines per row of its softmax and finalization (not with grouped
///    rows): such tasks are too short to wait for their operands' first touch.
///
/// Backward (attention only):
///  - block_k (or as requested): the least multiple of 6 and of the P·V microkernel's strip width
///    that is at least 144: whole 6-row register blocks and whole strips.
///  - block_q (or as requested): block_k, halved while a strip of the transposed products' right
///    operand (block_q rows of the strip width) exceeds 24 KiB and the half is a multiple of 6, so
///    that the strip serves every register block of keys from L1. block_q divides block_k, so a
///    causal diagonal cuts the same area of partial tiles as square blocks.
///  - key_chunks: enough chunks for 8 when batch x key heads is smaller, up to 8 and at least block_k
///    keys each. dQ gathers one partial per chunk, summed in chunk order: like the forward's
///    decoding split this depends on the shape only, so the gradients are bitwise identical for
///    every thread count.
///  - tasks: one per key block. A chunk's key blocks add into its dQ partial in key order (each
///    query block waits for its turn), so they may run on any threads and the sums are those of one
///    thread. The streams (chunk, batch x key head) are handed out in groups of as many as there
///    are threads, a key block of each in turn: the threads then mostly work on different streams
///    whose operands fit in L3, and the last tasks are single key blocks.
///  - dq_in_place: with one chunk and dense rows, dQ accumulates in its result.
///  - fused_epilogues: without modifiers or dropout, tiles of plain products compute P and dS in the
///    score products' epilogues.
///  - threads as in the forward, by the backward's flop.
#ifdef XATTN_PRECOMPILED_KERNELS
resolved_schedule resolve_schedule(const schedule& requested, const problem& pr, const plan_facts& facts,
                                   pass_kind kind, const machine& m = machine::here());
#endif

}  // namespace xattn

// The rules themselves: compiled once into libxattn_kernels when the program links it, else inline.
#ifndef XATTN_PRECOMPILED_KERNELS
#include "schedule_rules.hpp"
#endif
