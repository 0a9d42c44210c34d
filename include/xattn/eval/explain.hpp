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

}  // namespace detail

template <expression E>
explanation explain(const E& e, const schedule& sch = {}) {
  explanation x;
  if constexpr (check_grammar<E>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    using Acc = detail::acc_t<P>;
    using Base = std::decay_t<decltype(p.base)>;
    using Path = path_t<Acc, Base>;
    constexpr pass_kind kind = P::has_values             ? pass_kind::attention
                               : detail::is_weights_v<E> ? pass_kind::weights
                                                         : pass_kind::scores;
    x.sizes = resolve(p);
    const problem& pr = x.sizes;
    x.schedule = detail::schedule_for(p, pr, sch, kind);
    const resolved_schedule& rs = x.schedule;
    const auto ops = bind_all(p.ops, pr);
    const auto masks = bind_all(p.masks, pr);
    x.folds_log2e = kind != pass_kind::scores && folds_log2e(ops, masks);
    x.path = std::string(Path::name);
    const path_facts facts = Path::facts(p.base, pr);

    std::ostringstream os;
    os << (kind == pass_kind::attention ? "attention: softmax(masked scores) * V"
           : kind == pass_kind::weights ? "weights: softmax(masked scores), materialised (B, Hq, Sq, Skv)"
                                        : "scores: masked scores, materialised (B, Hq, Sq, Skv)")
       << "\n";
    os << "  operands    ";
    if constexpr (Base::tensor_scores)
      os << detail::operand("X", p.base.x);
    else
      os << detail::operand("Q", p.base.q) << ", " << detail::operand("K", p.base.k);
    if constexpr (P::has_values) os << ", " << detail::operand("V", p.v);
    os << "; accumulate in " << detail::element_name<Acc>() << "\n";
    os << "  score path  " << Path::name << ": " << Path::what;
    if constexpr (!Base::tensor_scores) os << " [policy " << detail::type_name<typename Base::policy_type>() << "]";
    os << "\n  scale       " << p.scale;
    if (kind == pass_kind::scores)
      os << " (natural units)";
    else if (x.folds_log2e)
      os << " x log2 e, folded " << (facts.dot_product ? "into the queries" : "into the scale");
    else
      os << "; scores times log2 e per row, after modifiers and masks (a modifier or a filling mask needs natural "
            "units)";
    os << "\n  modifiers   ";
    if (hana::length(ops) == hana::size_c<0>) os << "none";
    bool first = true;
    hana::for_each(ops, [&](const auto& op) {
      using Op = std::decay_t<decltype(op)>;
      os << (first ? "" : ", ") << detail::type_name<Op>()
         << (has_apply_row<Op, Acc> ? " (apply_row)" : " (operator() per element)");
      first = false;
    });
    os << "\n  masks       ";
    if (hana::length(masks) == hana::size_c<0>) os << "none";
    first = true;
    hana::for_each(masks, [&](const auto& m) {
      os << (first ? "" : ", ") << detail::mask_caps(m);
      first = false;
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

    const std::size_t n = facts.width, hkv = pr.kv_heads;
    os << "loop nest\n";
    if (rs.pack_panels)
      os << "  parallel for (b, kv head, key block) in " << pr.batch << " x " << hkv << " x "
         << (pr.kv_len + rs.block_k - 1) / rs.block_k << ": pack keys"
         << (Path::name == "dot_identity" ? "" : " (features)") << " into panels of " << n << " x " << rs.block_k
         << "\n";
    if (Path::name != "dot_identity" && !Base::tensor_scores)
      os << "  parallel for (b, kv head, key) in " << pr.batch << " x " << hkv << " x " << pr.kv_len
         << (Path::name == "pair_raw" ? ": copy keys" : ": project keys to ")
         << (Path::name == "pair_raw" ? "" : std::to_string(n) + " features") << "\n";
    os << "  parallel for (b, h, query block" << (rs.key_chunks > 1 ? ", key chunk" : "") << ") in " << pr.batch
       << " x " << pr.q_heads << " x " << rs.q_blocks
       << (rs.key_chunks > 1 ? " x " + std::to_string(rs.key_chunks) : "") << " = " << rs.tasks << " tasks on "
       << rs.threads << " thread" << (rs.threads == 1 ? "" : "s") << " (contiguous ranges, then stealing)\n";
    os << "    load " << rs.block_q << " query rows";
    if constexpr (!Base::tensor_scores)
      os << (Path::name == "dot_identity" || Path::name == "pair_raw" ? "" : ", project");
    os << (facts.dot_product ? ", scale folded in" : "") << "\n";
    const std::size_t span = rs.key_chunks > 1 ? rs.chunk_keys : pr.kv_len;
    const char* indent = "    ";
    auto block_loop = [&](const char* what) {
      os << indent << "for key block in [0, " << span << ") step " << rs.block_k << ": classify, skip hidden blocks"
         << what << "\n";
      os << indent << "  scores " << rs.block_q << " x " << rs.block_k << ": "
         << (rs.pack_panels     ? "qk_tile on the panel"
             : rs.keys_in_place ? "qk_direct on keys in place"
                                : "per pair")
         << "\n";
      os << indent << "  modifiers; masks on partial blocks" << (x.folds_log2e ? "" : "; x log2 e") << "\n";
    };
    if (kind == pass_kind::attention) {
      block_loop("");
      os << "      online softmax (base 2)" << (p.drop.p > 0 ? "; dropout" : "") << "\n";
      os << "      P·V " << rs.block_q << " x " << rs.block_k << " x " << pr.v_dim << ": pv_tile\n";
      os << "    finalize rows: O / l" << (rs.key_chunks > 1 ? " into chunk scratch" : "") << "\n";
      if (rs.key_chunks > 1) os << "  for each row: merge " << rs.key_chunks << " chunks by log-sum-exp\n";
    } else if (kind == pass_kind::weights) {
      block_loop(" (pass 1: max and sum)");
      os << "      online softmax state only\n";
      block_loop(" (pass 2: weights)");
      os << "      2^(s - m) / l" << (p.drop.p > 0 ? "; dropout" : "") << "; write " << rs.block_q << " x "
         << rs.block_k << "\n";
    } else {
      os << indent << "for key block in [0, " << pr.kv_len << ") step " << rs.block_k
         << ": scores, modifiers, masks; write " << rs.block_q << " x " << rs.block_k << "\n";
    }
    x.text = os.str();
  }
  return x;
}

}  // namespace xattn
