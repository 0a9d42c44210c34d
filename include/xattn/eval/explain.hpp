#pragma once
// xattn::explain(e [, schedule]): what eval(e, schedule) will do, as text -- the plan (kind, types,
// score path, scale and log2 e, modifiers, masks, dropout) and the resolved schedule as a loop
// nest with its sizes, threads and chunks, in the spirit of Halide's print_loop_nest. Nothing is
// computed; the sizes are read off the terminals and checked as eval would.
#include "eval.hpp"

#include <ostream>
#include <sstream>
#include <string>
#include <string_view>

namespace xattn {

struct explanation {
  std::string path;  // the score path's name
  bool folds_log2e = false;
  problem sizes;
  resolved_schedule schedule;
  std::string text;  // everything, printable

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
  return std::is_same_v<T, float> ? "float" : "double";
}

template <class Tm>
std::string operand(const char* name, const Tm& t) {
  return std::string(name) + " " + element_name<typename Tm::value_type>() + " " + shape_str(t.user_shape());
}

template <class M>
std::string mask_caps(const M& m) {
  std::string s = type_name<M>() + " (";
  const double f = fill_of(m);
  s += std::isinf(f) ? "excludes" : "fills " + [&] {
    std::ostringstream os;
    os << f;
    return os.str();
  }();
  if constexpr (has_classify<M>) s += "; classify skips blocks";
  if constexpr (has_hide_row<M, float>)
    s += "; hide_row";
  else if constexpr (has_row_span<M>)
    s += "; row_span fills ranges";
  else
    s += "; visible() per element on partial blocks";
  return s + ")";
}

/// The plan half: kind, operands, score path, scale, modifiers, masks, dropout, schedule.
template <class Path, class Acc, class Plan, class Ops, class Masks>
void describe_plan(std::ostream& os, const Plan& p, const Ops& ops, const Masks& masks, pass_kind kind,
                   const explanation& x) {
  using Base = std::decay_t<decltype(p.base)>;
  const resolved_schedule& rs = x.schedule;
  os << (kind == pass_kind::attention ? "attention: softmax(masked scores) * V"
         : kind == pass_kind::weights ? "weights: softmax(masked scores), materialised (B, Hq, Sq, Skv)"
                                      : "scores: masked scores, materialised (B, Hq, Sq, Skv)")
     << "\n  operands    ";
  if constexpr (Base::tensor_scores)
    os << operand("X", p.base.x);
  else
    os << operand("Q", p.base.q) << ", " << operand("K", p.base.k);
  if constexpr (Plan::has_values) os << ", " << operand("V", p.v);
  os << "; accumulate in " << element_name<Acc>() << "\n  score path  " << Path::name << ": " << Path::what;
  if constexpr (!Base::tensor_scores) os << " [policy " << type_name<typename Base::policy_type>() << "]";
  os << "\n  scale       " << p.scale;
  if (kind == pass_kind::scores)
    os << " (natural units)";
  else if (x.folds_log2e)
    os << " x log2 e, folded into " << (Path::facts(p.base, x.sizes).dot_product ? "the queries" : "the scale");
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
  os << "\n  schedule    block_q " << rs.block_q << ", block_k " << rs.block_k << ", threads " << rs.threads << " ("
     << rs.threads_reason << "; " << rs.flop << " flop)";
  if (rs.key_chunks > 1) os << ", keys split into " << rs.key_chunks << " chunks of " << rs.chunk_keys;
  os << "\n";
}

/// The loop-nest half, as Halide's print_loop_nest: the key preparation, the tasks, one task's loop.
template <class Path>
void describe_loop_nest(std::ostream& os, pass_kind kind, bool dropout, const explanation& x) {
  const problem& pr = x.sizes;
  const resolved_schedule& rs = x.schedule;
  const std::size_t blocks = (pr.kv_len + rs.block_k - 1) / rs.block_k;
  os << "loop nest\n";
  if (!Path::key_work.empty())
    os << "  parallel for (b, kv head, key) in " << pr.batch << " x " << pr.kv_heads << " x " << pr.kv_len << ": "
       << Path::key_work << "\n";
  if (rs.pack_panels)
    os << "  parallel for (b, kv head, key block) in " << pr.batch << " x " << pr.kv_heads << " x " << blocks
       << ": pack into panels of " << rs.block_k << " keys\n";
  const std::string chunks = rs.key_chunks > 1 ? " x " + std::to_string(rs.key_chunks) : "";
  if (rs.group_rows > 0)
    os << "  parallel for (b, kv head" << (rs.key_chunks > 1 ? ", key chunk" : "") << ") in " << pr.batch << " x "
       << pr.kv_heads << chunks << " = " << rs.tasks << " tasks, each the " << rs.group_rows
       << " query heads of the group as rows,";
  else
    os << "  parallel for (b, h, query block" << (rs.key_chunks > 1 ? ", key chunk" : "") << ") in " << pr.batch
       << " x " << pr.q_heads << " x " << rs.q_blocks << chunks << " = " << rs.tasks << " tasks";
  os << " on " << rs.threads << " thread" << (rs.threads == 1 ? "" : "s") << " (contiguous ranges, then stealing)\n";
  if (rs.pack_per_head)
    os << "    on a new (b, kv head): pack its key blocks into panels of " << rs.block_k
       << " keys as they are first needed, in this thread\n";
  if (!Path::query_work.empty())
    os << "    " << Path::query_work << " " << rs.block_q << " query rows"
       << (rs.pack_panels || rs.pack_per_head || rs.keys_in_place ? ", scale folded in" : "") << "\n";
  const std::size_t span = rs.key_chunks > 1 ? rs.chunk_keys : pr.kv_len;
  const char* tile = rs.pack_panels || rs.pack_per_head ? "qk_tile on the panel"
                     : rs.keys_in_place                 ? "qk_direct on keys in place"
                                                        : "per pair";
  auto block_loop = [&](const char* pass) {
    os << "    for key block in [0, " << span << ") step " << rs.block_k << ": classify, skip hidden blocks" << pass
       << "\n      scores " << rs.block_q << " x " << rs.block_k << ": " << tile
       << "\n      modifiers; masks on partial blocks" << (x.folds_log2e ? "" : "; x log2 e") << "\n";
  };
  if (kind == pass_kind::attention) {
    block_loop("");
    os << "      online softmax (base 2)" << (dropout ? "; dropout" : "") << "\n      P·V " << rs.block_q << " x "
       << rs.block_k << " x " << pr.v_dim << ": pv_tile\n    finalize rows: O / l"
       << (rs.key_chunks > 1 ? " into chunk scratch" : "") << "\n";
    if (rs.key_chunks > 1) os << "  for each row: merge " << rs.key_chunks << " chunks by log-sum-exp\n";
  } else if (kind == pass_kind::weights) {
    block_loop(" (pass 1: max and sum)");
    os << "      online softmax state only\n";
    block_loop(" (pass 2: weights)");
    os << "      2^(s - m) / l" << (dropout ? "; dropout" : "") << "; write " << rs.block_q << " x " << rs.block_k
       << "\n";
  } else {
    os << "    for key block in [0, " << pr.kv_len << ") step " << rs.block_k << ": scores, modifiers, masks; write "
       << rs.block_q << " x " << rs.block_k << "\n";
  }
}

}  // namespace detail

template <expression E>
explanation explain(const E& e, const schedule& sch = {}) {
  explanation x;
  if constexpr (check_grammar<E>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    using Acc = detail::acc_t<P>;
    using Path = path_t<Acc, std::decay_t<decltype(p.base)>>;
    constexpr pass_kind kind = P::has_values             ? pass_kind::attention
                               : detail::is_weights_v<E> ? pass_kind::weights
                                                         : pass_kind::scores;
    x.sizes = resolve(p);
    x.schedule = detail::schedule_for(p, x.sizes, sch, kind);
    const auto ops = bind_all(p.ops, x.sizes);
    const auto masks = bind_all(p.masks, x.sizes);
    x.folds_log2e = kind != pass_kind::scores && folds_log2e(ops, masks);
    x.path = std::string(Path::name);
    std::ostringstream os;
    detail::describe_plan<Path, Acc>(os, p, ops, masks, kind, x);
    detail::describe_loop_nest<Path>(os, kind, p.drop.p > 0, x);
    x.text = os.str();
  }
  return x;
}

}  // namespace xattn
