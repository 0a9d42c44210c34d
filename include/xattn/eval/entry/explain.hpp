#pragma once
// xattn::explain(e [, schedule [, machine] [, xattn::with_backward]]): what eval(e, schedule) --
// and, with xattn::with_backward, grad(e, f, d_out, schedule) -- will do (on this machine, or on
// the one given), as text: the plan (kind, types, score path, scale and log2 e, modifiers, masks,
// dropout) and the resolved schedule as loop nests with their sizes, threads and chunks, in the
// spirit of Halide's print_loop_nest. Nothing is computed:
// the sizes are read off the terminals and checked as eval would, the schedule is the value the
// run uses, and every tile operation named comes from the score path's type and that value
// (explanation::forward_ops and backward_ops list them; a run records a subset of them).
#include "../../cache/format.hpp"
#include "../../kernel/trace.hpp"
#include "../backward/backward.hpp"
#include "../forward/fused_worker.hpp"
#include "../paths/select.hpp"
#include "../plan/program.hpp"
#include "../plan/resolve.hpp"
#include "plumbing.hpp"

#include <algorithm>
#include <cctype>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace xattn {

/// explain(e, schedule, xattn::with_backward): explain the backward too.
struct backward_pass {};
inline constexpr backward_pass with_backward{};

/// One line of a loop nest as explain prints it: its depth, whether it is a loop (the lines deeper
/// than it, after it, are its body, repeated), and the tile operations it names, in its order.
struct stage {
  int depth = 0;
  bool loop = false;
  std::string text;
  std::vector<kernel::tile_op> ops;
};

struct explanation {
  std::string path;  // the score path's name
  bool folds_log2e = false;
  problem sizes;
  resolved_schedule schedule;
  std::vector<kernel::tile_op> forward_ops;   // every tile operation the forward may run
  std::vector<kernel::tile_op> backward_ops;  // and the backward's (explained with xattn::with_backward)
  std::vector<stage> forward_stages;          // the forward's loop nest, line by line
  std::vector<stage> backward_stages;         // and the backward's
  std::string text;                           // everything, printable

  friend std::ostream& operator<<(std::ostream& os, const explanation& x) { return os << x.text; }
};

namespace detail {

/// A type's name as the compiler spells it, without the xattn:: prefix.
template <class T>
std::string type_name() {
  std::string_view f = __PRETTY_FUNCTION__;  // "... type_name() [with T = NAME; ...]"
  const auto at = f.find("T = ") + 4;
  std::string n(f.substr(at, f.find_first_of(";]", at) - at));
  for (std::size_t p; (p = n.find("xattn::")) != std::string::npos;) n.erase(p, 7);
  return n;
}

template <class T>
std::string element_name() {
  if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
  else if constexpr (std::is_same_v<T, bfloat16>)
    return "bfloat16";
  else if constexpr (is_quantized_v<T>)
    return cache_format<T>::name;
  else
    return "float16";
}

template <class Tm>
std::string operand(const char* name, const Tm& t) {
  std::string s = std::string(name) + " " + element_name<typename Tm::value_type>() + " " + shape_str(t.user_shape());
  if constexpr (is_transformed_v<Tm>) s += " through " + t.transform.name();
  if constexpr (is_cache_terminal_v<Tm>) {
    s +=
        " in pages of " + std::to_string(t.view.idx.size) + " tokens, sequences of " + shape_str(t.lengths) + " tokens";
    if (t.hadamard)
      s += ", turned by a Hadamard rotation of blocks of " + std::to_string(t.hadamard) + " (the queries turn alike)";
  }
  if constexpr (is_selected_terminal_v<Tm>)
    s += ": per query, the rows idx " +
         std::string(std::is_same_v<typename Tm::index_type, std::int32_t> ? "int32 " : "int64 ") +
         shape_str(t.view.idx.at.shape) + " selects " + operand("of", t.from);
  return s;
}

inline std::string number(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

template <class M>
std::string mask_caps(const M& m) {
  std::string s = type_name<M>() + " (";
  const double f = fill_of(m);
  s += std::isinf(f) ? "excludes" : "fills " + number(f);
  if constexpr (has_classify<M>) s += "; classify skips blocks";
  if constexpr (has_hide_row<M, float>)
    s += "; hide_row";
  else if constexpr (has_row_span<M>)
    s += "; row_span fills ranges";
  else
    s += "; visible() per element on partial blocks";
  return s + ")";
}

/// The operations of `named` in the order text names them (a name counts where no longer name
/// goes on: pair_program is not named by pair_program_gradients).
/// (A template, as the rest of explain: nothing of it is compiled into a program that does not call it.)
template <class Op = kernel::tile_op>
std::vector<Op> in_text_order(const std::vector<Op>& named, const std::string& text) {
  std::vector<std::pair<std::size_t, Op>> at;
  for (Op o : named) {
    const std::string name = kernel::name_of(o);
    for (std::size_t p = text.find(name); p != std::string::npos; p = text.find(name, p + 1)) {
      const std::size_t end = p + name.size();
      const bool whole = end == text.size() ||
                         !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_' || text[end] == '[');
      if (whole && std::find(at.begin(), at.end(), std::pair{p, o}) == at.end()) at.emplace_back(p, o);
    }
  }
  std::sort(at.begin(), at.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Op> ops;
  for (const auto& [p, o] : at) ops.push_back(o);
  return ops;
}

/// A loop nest being written: its lines (stages) and the tile operations they name.
template <class Op = kernel::tile_op>
class basic_nest {
 public:
  basic_nest(std::vector<Op>& ops, std::vector<stage>& stages) : ops_(ops), stages_(stages) {}
  /// A line; a loop's body is the lines deeper than it that follow.
  basic_nest& add(int depth, bool loop, const std::string& text) {
    stages_.push_back({depth, loop, text, in_text_order(ops_, text)});  // every op a line names went through op()
    return *this;
  }
  /// The name of op, recorded as one the run may execute.
  std::string op(kernel::tile_op o) {
    if (std::find(ops_.begin(), ops_.end(), o) == ops_.end()) ops_.push_back(o);
    return kernel::name_of(o);
  }
  /// The names of a list of ops, joined.
  template <class List>
  std::string ops(const List& list, const char* sep = ", ") {
    std::string s;
    for (kernel::tile_op o : list) s += (s.empty() ? "" : sep) + op(o);
    return s;
  }
  /// The nest as text, a line per stage.
  std::string str() const {
    std::string s;
    for (const stage& l : stages_) s += std::string(std::size_t(2 * l.depth), ' ') + l.text + '\n';
    return s;
  }

 private:
  std::vector<Op>& ops_;
  std::vector<stage>& stages_;
};

inline std::string threads_text(int threads, const std::string& reason, double flop) {
  return "threads " + std::to_string(threads) + " (" + reason + "; " + number(flop) + " flop)";
}

/// The plan half: kind, operands, score path, scale, modifiers, masks, dropout, schedule.
template <class Path, class Acc, class Plan, class Ops, class Masks>
void describe_plan(std::ostream& os, const Plan& p, const Ops& ops, const Masks& masks, const explanation& x) {
  using Base = std::decay_t<decltype(p.base)>;
  const forward_schedule& fs = x.schedule.forward;
  os << (fs.kind == pass_kind::attention ? "attention: softmax(masked scores) * V"
         : fs.kind == pass_kind::weights ? "weights: softmax(masked scores), materialised (B, Hq, Sq, Skv)"
                                         : "scores: masked scores, materialised (B, Hq, Sq, Skv)")
     << "\n  operands    ";
  int term = 0;
  bool first = true;
  hana::for_each(plan_operands(p), [&](const auto& o) {
    os << (first ? "" : o.term != term ? " + " : ", ") << operand(o.symbol, o.terminal);
    if constexpr (is_sum_base_v<Base>)
      if (o.role == operand_role::keys) os << " (x " << (o.term == 0 ? p.base.s1 : p.base.s2) << ")";
    first = false;
    term = o.term;
  });
  os << "; accumulate in " << element_name<Acc>() << "\n  score path  " << Path::name << ": " << Path::what;
  if constexpr (!Base::tensor_scores) os << " [policy " << type_name<typename Base::policy_type>() << "]";
  if constexpr (requires { Path::describe(p.base, x.sizes); })
    os << "\n  separated   " << Path::describe(p.base, x.sizes);
  os << "\n  scale       " << p.scale;
  if (fs.kind == pass_kind::scores)
    os << " (natural units)";
  else if (x.folds_log2e)
    os << " x log2 e, folded into " << (fs.keys != key_reads::none ? "the queries" : "the scale");
  else
    os << "; scores times log2 e per row, after modifiers and masks (a modifier or a filling mask needs natural "
          "units)";
  os << "\n  modifiers   " << (hana::length(ops) == hana::size_c<0> ? "none" : "");
  const char* sep = "";
  hana::for_each(ops, [&](const auto& op) {
    using Op = std::decay_t<decltype(op)>;
    os << sep << type_name<Op>() << (has_apply_row<Op, Acc> ? " (apply_row)" : " (operator() per element)");
    sep = ", ";
  });
  os << "\n  masks       " << (hana::length(masks) == hana::size_c<0> ? "none" : "");
  sep = "";
  hana::for_each(masks, [&](const auto& m) {
    os << sep << mask_caps(m);
    sep = ", ";
  });
  os << "\n  dropout     ";
  if (p.drop.p > 0)
    os << "p = " << p.drop.p << ", seed " << p.drop.seed << " (Philox on (seed, b, h, i, j))";
  else
    os << "none";
  if constexpr (std::decay_t<decltype(p)>::has_term) {
    const std::string name = p.term.name();
    os << "\n  " << name << std::string(name.size() < 12 ? 12 - name.size() : 1, ' ') << p.term.describe();
  }
  os << "\n  schedule    block_q " << fs.block_q << ", block_k " << fs.block_k << ", "
     << threads_text(fs.threads, fs.threads_reason, fs.flop);
  if (fs.key_chunks > 1) os << ", keys split into " << fs.key_chunks << " chunks of " << fs.chunk_keys;
  os << "\n";
}

/// The forward loop nest, a line per step of forward_program (what the run executes); value_op
/// adds P·V (value_reader::op).
template <class Path, class Acc>
std::string forward_nest(const explanation& x, bool dropout, kernel::tile_op value_op,
                         std::vector<kernel::tile_op>& ops, std::vector<stage>& stages) {
  const problem& pr = x.sizes;
  const forward_schedule& fs = x.schedule.forward;
  const std::size_t blocks = (pr.kv_len + fs.block_k - 1) / fs.block_k;
  const std::string bq = std::to_string(fs.block_q), bk = std::to_string(fs.block_k);
  const std::size_t span = fs.key_chunks > 1 ? fs.chunk_keys : pr.kv_len;
  const kernel::tile_op score_op = Path::score_op(fs);
  basic_nest<> n(ops, stages);
  const auto text = [&](const program_step& s) -> std::string {
    switch (s.kind) {
      case step::heading:
        return "loop nest";
      case step::prepare_keys: {
        std::string t = !Path::key_work.empty() ? "parallel for (b, kv head, key) in " + std::to_string(pr.batch) +
                                                      " x " + std::to_string(pr.kv_heads) + " x " +
                                                      std::to_string(pr.kv_len) + ": " + std::string(Path::key_work) +
                                                      (Path::key_ops.empty() ? "" : " (" + n.ops(Path::key_ops) + ")")
                                                : "";
        if (fs.keys == key_reads::panels)
          t += (t.empty() ? "parallel for (b, kv head, key block) in " : "; then by (b, kv head, key block) in ") +
               std::to_string(pr.batch) + " x " + std::to_string(pr.kv_heads) + " x " + std::to_string(blocks) +
               ": pack into panels of " + bk + " keys (" + n.op(Path::key_pack_op) + ")";
        return t;
      }
      case step::tasks: {
        const std::string chunks = fs.key_chunks > 1 ? " x " + std::to_string(fs.key_chunks) : "";
        const std::string on = " on " + std::to_string(fs.threads) + " thread" + (fs.threads == 1 ? "" : "s") +
                               " (contiguous ranges, then stealing)";
        if (fs.group_rows > 0)
          return "parallel for (b, kv head" + std::string(fs.key_chunks > 1 ? ", key chunk" : "") + ") in " +
                 std::to_string(pr.batch) + " x " + std::to_string(pr.kv_heads) + chunks + " = " +
                 std::to_string(fs.tasks) + " tasks, each the " + std::to_string(fs.group_rows) +
                 " query heads of the group as rows," + on;
        return "parallel for (b, h, query block" + std::string(fs.key_chunks > 1 ? ", key chunk" : "") + ") in " +
               std::to_string(pr.batch) + " x " + std::to_string(pr.q_heads) + " x " + std::to_string(fs.q_blocks) +
               chunks + " = " + std::to_string(fs.tasks) + " tasks" + on;
      }
      case step::prefetch_next:
        return "prefetch the next task's query and output rows, and on a new (b, kv head) the next head's keys and "
               "values, a few lines per row of the softmax and finalization";
      case step::start_rows:
        return (score_op == kernel::tile_op{kernel::operation::tensor_scores}
                    ? std::string("start ")
                    : std::string(Path::query_ops.empty() ? "gather "
                                                          : "gather and project (" + n.ops(Path::query_ops) + ") ") +
                          bq + " query rows" + (fs.keys != key_reads::none ? ", scale folded in" : "") + "; start ") +
               "each row's softmax" + (fs.kind == pass_kind::scores ? " (unused: scores only)" : "");
      case step::key_blocks:
        return "for key block in [0, " + std::to_string(s.pass == block_pass::output ? span : pr.kv_len) + ") step " +
               bk + ": classify, skip hidden blocks" +
               (s.pass == block_pass::state     ? " (pass 1: max and sum)"
                : s.pass == block_pass::weights ? " (pass 2: weights; hidden keys written 0)"
                : s.pass == block_pass::scores  ? " (hidden blocks written -inf)"
                                                : "");
      case step::scores: {
        const std::string packs =
            fs.keys == key_reads::per_head
                ? n.op(Path::key_pack_op) + " as a (b, kv head)'s panels are first needed, in this thread; "
                : "";
        return "scores " + bq + " x " + bk + ": " + packs + n.op(score_op) +
               (fs.keys == key_reads::in_place ? " on keys in place"
                : fs.keys == key_reads::none   ? ""
                                               : " on the panel");
      }
      case step::modify_mask:
        return "modifiers; masks on partial blocks";
      case step::online_softmax:
        return std::string("online softmax (base 2") + (x.folds_log2e ? "" : "; scores x log2 e first") + ")" +
               (dropout ? "; dropout" : "");
      case step::softmax_state:
        return std::string("online softmax state only") + (x.folds_log2e ? "" : " (scores x log2 e first)");
      case step::write_weights:
        return "2^(s - m) / l" + std::string(dropout ? "; dropout" : "") + "; write " + bq + " x " + bk;
      case step::write_scores:
        return "write " + bq + " x " + bk;
      case step::values: {
        const std::string packs =
            fs.values == value_reads::strips ? n.op(kernel::op_on<Acc>(kernel::operation::pack_strips)) +
                                                   " as a (b, kv head)'s value blocks are first needed; "
            : fs.values == value_reads::bf16_pairs
                ? n.op({kernel::operation::pack_strips, kernel::bf16_pairs}) +
                      " as a (b, kv head)'s bfloat16 value blocks are first needed (key pairs); "
            : fs.values == value_reads::widened_per_head ? "a (b, kv head)'s value blocks widened as first needed; "
                                                         : "";
        return "P·V " + bq + " x " + bk + " x " + std::to_string(pr.v_dim) + ": " + packs + n.op(value_op) +
               (fs.values == value_reads::in_place ? " on values in place"
                : fs.values == value_reads::widened_per_head || fs.values == value_reads::copied_per_task
                    ? " on converted values"
                    : "");
      }
      case step::finalize:
        return std::string("finalize rows: O / l") + (fs.key_chunks > 1 ? " into chunk scratch" : "");
      case step::merge_chunks:
        return "parallel for (b, h, query): merge " + std::to_string(fs.key_chunks) + " chunks by log-sum-exp (" +
               n.op(kernel::tile_op{kernel::operation::merge_row}) + ")";
      default:
        return "";
    }
  };
  for (const program_step& s : forward_program(fs, !Path::key_work.empty())) n.add(s.depth, s.loop, text(s));
  return n.str();
}

/// The backward loop nest, a line per step of backward_program (explained for rows whose
/// log-sum-exp is finite and their own; a run adds the general tile for others).
template <class Path, class Acc>
std::string backward_nest(const explanation& x, bool masked, bool modified, bool dropout, bool value_pairs,
                          std::vector<kernel::tile_op>& ops, std::vector<stage>& stages) {
  using kernel::operation;
  using kernel::tile_op;
  const problem& pr = x.sizes;
  const backward_schedule& bs = x.schedule.backward;
  const std::size_t per_chunk = bs.chunk_keys / std::max<std::size_t>(bs.block_k, 1);
  basic_nest<> n(ops, stages);
  // the value side: V in the keys' place of a product of rows, dO in the queries'
  const auto on = [&](operation op) { return value_pairs ? tile_op{op, kernel::bf16_pairs} : kernel::op_on<Acc>(op); };
  const tile_op v_pack = on(operation::pack_kt), dp_op = on(operation::qk_tile);
  const std::string dv = "dV += Pᵀ·dO (" + n.op(on(operation::pack_strips)) + ", " +
                         n.op(value_pairs ? tile_op{operation::pv_tile_strips, kernel::bf16_pairs}
                                          : kernel::op_on<Acc>(operation::pv_tile_transposed_strips)) +
                         ")";
  const program prog = backward_program_of<Acc, Path>(bs, pr, masked, true);
  int headings = 0;
  const auto text = [&](const program_step& s) -> std::string {
    switch (s.kind) {
      case step::heading:
        switch (headings++) {
          case 0:
            return "backward";
          case 1:
            return "schedule    block_q " + std::to_string(bs.block_q) + ", block_k " + std::to_string(bs.block_k) +
                   ", " + threads_text(bs.threads, bs.threads_reason, bs.flop) +
                   (bs.key_chunks > 1 ? ", keys split into " + std::to_string(bs.key_chunks) + " chunks of " +
                                            std::to_string(bs.chunk_keys)
                                      : "") +
                   (bs.dq_in_place ? "; dQ accumulated in place" : "; dQ partials per chunk");
          default:
            return "loop nest";
        }
      case step::row_deltas:
        return "parallel for (b, h, query): delta = rowsum(dO ∘ O); rows beyond |lse| " + number(large_lse) +
               " take exact statistics from a scores pass";
      case step::prepare_rows:
        return "parallel for (b, head, row): queries and keys to the score path's rows" +
               (Path::backward_ops.prepare.empty() ? "" : " (" + n.ops(Path::backward_ops.prepare) + ")");
      case step::tasks:
        return "parallel for (b, kv head, key chunk, key block) in " + std::to_string(pr.batch) + " x " +
               std::to_string(pr.kv_heads) + " x " + std::to_string(bs.key_chunks) + " x " + std::to_string(per_chunk) +
               " = " + std::to_string(bs.tasks) + " tasks on " + std::to_string(bs.threads) + " thread" +
               (bs.threads == 1 ? "" : "s") + " (streams in groups of " + std::to_string(bs.group) + ")";
      case step::load_block:
        return "values into a panel (" + n.op(v_pack) + ")" +
               (Path::backward_ops.keys.empty() ? "" : "; keys (" + n.ops(Path::backward_ops.keys) + ")") +
               "; zero dK, dV";
      case step::query_blocks:
        return "for query head of the group, query block in [0, " + std::to_string(pr.q_len) + ") step " +
               std::to_string(bs.block_q) +
               ", after the chunk's earlier key blocks: classify, trim to the visible part, skip hidden tiles";
      case step::plain_tile:
        return std::string(prog.has(step::general_tile) ? "a tile nothing hides, of whole batches: " : "") +
               "S and P: " + n.ops(Path::backward_ops.scores) + " with " + n.op({operation::probs_epilogue}) + "; " +
               dv + "; dP and dS: " + n.op(dp_op) + " with " + n.op({operation::softmax_grad_epilogue});
      case step::general_tile:
        return std::string(prog.has(step::plain_tile) ? "any other tile: " : "") +
               "S: " + n.ops(Path::backward_ops.scores) + (modified ? "; modifiers" : "") +
               "; masks; P: " + n.op({operation::probs_row}) + (dropout ? "; dropout" : "") + "; " + dv +
               "; dP: " + n.op(dp_op) + "; dS: " + n.op({operation::softmax_grad_row}) +
               (modified ? ", back through the modifiers" : "");
      case step::tile_gradients:
        return "from dS: " + n.ops(Path::backward_ops.gradients);
      case step::store_block:
        return "write dK, dV rows";
      case step::reduce_rows:
        return std::string("parallel for (b, h, query): ") +
               (bs.dq_in_place ? "the score path's row partials summed in chunk order"
                               : "dQ partials, and the score path's row partials, summed in chunk order");
      case step::finish_rows:
        return Path::backward_ops.finish.empty()
                   ? "the score path's last step (its parameters' gradients, if any)"
                   : "for (b, head, row): the gradients at the features back to the rows (" +
                         n.ops(Path::backward_ops.finish) + ")";
      default:
        return "";
    }
  };
  for (const program_step& s : prog) n.add(s.depth, s.loop, text(s));
  return n.str();
}

template <class E, bool Backward>
explanation explain_impl(const E& e, const schedule& sch, const machine& m) {
  explanation x;
  if constexpr (check_grammar<E>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    using Acc = accumulator_of_t<P>;
    using Path = plan_path_t<P>;
    constexpr pass_kind kind = P::has_values             ? pass_kind::attention
                               : detail::is_weights_v<E> ? pass_kind::weights
                                                         : pass_kind::scores;
    x.sizes = resolve(p);
    const std::size_t positions = x.sizes.q_len;
    x.schedule = schedule_for(p, x.sizes, sch, kind, m);
    if constexpr (selects_v<P>) {  // a pass per query position, as run_selected schedules it
      x.sizes.q_len = 1;
      x.schedule = schedule_for(p, x.sizes, selected_schedule(x.schedule.forward), kind, m);
    }
    const auto ops = bind_all(p.ops, x.sizes);
    const auto masks = bind_all(p.masks, x.sizes);
    x.folds_log2e = kind != pass_kind::scores && folds_log2e(ops, masks);
    x.path = std::string(Path::name);
    std::ostringstream os;
    describe_plan<Path, Acc>(os, p, ops, masks, x);
    if constexpr (selects_v<P>)
      os << "for each query position in [0, " << positions << "): the pass below over the " << x.sizes.kv_len
         << " keys idx selects for it" << (Backward ? " (and its backward, dK and dV rows added where selected)" : "")
         << "\n";
    os << forward_nest<Path, Acc>(x, p.drop.p > 0,
                                  value_reader<Acc, std::decay_t<decltype(p.v)>>::op(x.schedule.forward.values),
                                  x.forward_ops, x.forward_stages);
    if constexpr (Backward) {
      if constexpr (check_backward<P>())
        os << backward_nest<Path, Acc>(
            x, !decltype(hana::is_empty(masks))::value, !decltype(hana::is_empty(ops))::value, p.drop.p > 0,
            takes_value_pairs_v<Acc, typename decltype(p.v)::value_type>, x.backward_ops, x.backward_stages);
    }
    x.text = os.str();
  }
  return x;
}

}  // namespace detail

/// What eval(e, sch) will do.
template <expression E>
explanation explain(const E& e, const schedule& sch = {}) {
  return detail::explain_impl<E, false>(e, sch, machine::here());
}

/// What eval(e, sch) and grad(e, f, d_out, sch) will do.
template <expression E>
explanation explain(const E& e, const schedule& sch, backward_pass) {
  return detail::explain_impl<E, true>(e, sch, machine::here());
}

/// What they would do on machine m (its L2 size and thread count), whichever machine this is: a
/// schedule printed for the docs or a test, the same everywhere.
template <expression E>
explanation explain(const E& e, const schedule& sch, const machine& m) {
  return detail::explain_impl<E, false>(e, sch, m);
}
template <expression E>
explanation explain(const E& e, const schedule& sch, const machine& m, backward_pass) {
  return detail::explain_impl<E, true>(e, sch, m);
}

}  // namespace xattn
