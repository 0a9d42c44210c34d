"""C++ from traced functions: a score modifier op(s, b, h, i, j) generic over its scalar U (the
fused pass differentiates it on dual numbers and param_dual) and a mask predicate f(b, h, i, j),
with the glue xattn.flex loads through ctypes. The source is a function of the traced graph only,
so it is also the cache key of the compiled library."""

import math

from ._trace import BOOL, FLOAT, INT, precisions

_NS = "xattn::c_api::flex::"


def _literal(node):
    x = node.args[0]
    if node.kind == BOOL:
        return "true" if x else "false"
    if node.kind == INT:
        if not -2 ** 63 <= x < 2 ** 63:
            raise OverflowError("flex_attention: the integer %d does not fit in int64" % x)
        return "std::int64_t(%dLL)" % x if x != -2 ** 63 else "std::numeric_limits<std::int64_t>::min()"
    if math.isnan(x):
        return "std::numeric_limits<double>::quiet_NaN()"
    if math.isinf(x):
        return ("-" if x < 0 else "") + "std::numeric_limits<double>::infinity()"
    return repr(float(x))


_COSTLY = {"exp", "log", "sqrt", "tanh", "sigmoid"}


def memo_plan(tracer, result):
    """Expensive index arithmetic worth a table: nodes N that depend on the indices only through one
    integer node D (T5's bucket of q_idx - kv_idx through log and floor), read per score from a
    table over D's range made once per call. [(N, D)], outermost first."""
    nodes = tracer.nodes

    def args(n):
        return [] if n.op == "const" else [a for a in n.args if isinstance(a, type(result))]

    def above(n, d):
        """n's nodes down to d (exclusive), or None when a path reaches an input or a capture past d."""
        seen, stack = {}, [n]
        while stack:
            x = stack.pop()
            if x is d or x.id in seen:
                continue
            if x.op in ("input", "capture"):
                return None
            seen[x.id] = x
            stack.extend(args(x))
        return seen

    consumers = {n.id: 0 for n in nodes}
    for n in nodes:
        for a in args(n):
            consumers[a.id] += 1
    live, stack = set(), [result]
    while stack:
        x = stack.pop()
        if x.id not in live:
            live.add(x.id)
            stack.extend(args(x))
    plan, covered = [], set()
    for n in reversed(nodes):
        if n.id not in live or n.id in covered or n.diff or n.op in ("const", "input", "capture"):
            continue
        for d in sorted((x for x in nodes if x.id < n.id and x.kind == INT and not x.diff and x.op != "const"),
                        key=lambda x: -x.id):
            region = above(n, d)
            if region is None or d.id in region:
                continue
            if any(x.op == "unary" and x.args[0] in _COSTLY for x in region.values()):
                plan.append((n, d))
                covered.update(region)
            break  # the nearest cut decides: a farther one only widens the table
    return plan


class _Writer:
    def __init__(self, tracer):
        self.tracer = tracer
        self.bits = precisions(tracer)

    def type_of(self, n):
        if n.kind == BOOL:
            return "bool"
        if n.kind == INT:
            return "std::int64_t"
        if n.diff:
            return "U"
        return "float" if self.bits[n.id] == 32 else "double"

    def conv(self, n, to):
        """Node n's variable as C++ type `to`."""
        have = self.type_of(n)
        name = "v%d" % n.id
        if have == to:
            return name
        if to == "bool":
            return "(%s != 0)" % name
        return "%s(%s)" % (to, name)

    def common(self, a, b):
        if a.diff or b.diff:
            return "U"
        if FLOAT in (a.kind, b.kind):
            bits = [self.bits[x.id] for x in (a, b) if x.kind == FLOAT and self.bits[x.id]]
            return "float" if bits and max(bits) == 32 else "double"
        if a.kind == b.kind == BOOL:
            return "bool"
        return "std::int64_t"

    def expression(self, n, captures):
        op, args = n.op, n.args
        t = self.type_of(n)
        if op == "const":
            return _literal(n)
        if op == "input":
            name = args[0]
            return "s_" if n.kind == FLOAT else "std::int64_t(%s_)" % name
        if op == "capture":
            c = captures[args[0]]
            index = ", ".join(self.conv(i, "std::int64_t") for i in args[1:])
            read = "c%d(%s)" % (c.slot, index)
            if c.learns:
                return "U(%s)" % read
            return "(%s != 0)" % read if c.kind == BOOL else read
        if op == "cast":
            kind, a = args[0], args[1]
            if kind == INT and a.kind == FLOAT:
                return _NS + "to_int(v%d)" % a.id
            return self.conv(a, t)
        if op == "where":
            c, a, b = args
            return "(v%d ? %s : %s)" % (c.id, self.conv(a, t), self.conv(b, t))
        if op == "unary":
            u, a = args
            if u == "not":
                return "(!v%d)" % a.id if n.kind == BOOL else "(~v%d)" % a.id
            if u == "neg":
                return "(-%s)" % self.conv(a, t)
            if n.kind == INT:
                x = self.conv(a, t)
                return {"abs": "(%s < 0 ? -%s : %s)" % (x, x, x), "sign": "std::int64_t((%s > 0) - (%s < 0))" % (x, x),
                        "floor": x, "ceil": x}[u]
            x = self.conv(a, t)
            if t != "U":
                if u == "sigmoid":
                    return "(%s(1) / (%s(1) + std::exp(-%s)))" % (t, t, x)
                if u == "sign":
                    return "%s((%s > 0) - (%s < 0))" % (t, x, x)
                return "std::%s(%s)" % (u, x)
            if u == "sigmoid":
                return "(U(1) / (U(1) + exp(-%s)))" % x
            if u == "sign":
                return "(%s > U(0) ? U(1) : %s < U(0) ? U(-1) : U(0))" % (x, x)
            return "%s(%s)" % (u, x)
        assert op == "binary"
        b_op, a, b = args
        if b_op in ("<", "<=", ">", ">=", "==", "!="):
            ct = self.common(a, b)
            ct = "std::int64_t" if ct == "bool" and b_op not in ("==", "!=") else ct
            return "(%s %s %s)" % (self.conv(a, ct), b_op, self.conv(b, ct))
        if b_op in ("&", "|", "^"):
            if n.kind == BOOL:
                return "(v%d %s v%d)" % (a.id, {"&": "&&", "|": "||", "^": "!="}[b_op], b.id)
            return "(%s %s %s)" % (self.conv(a, t), b_op, self.conv(b, t))
        if b_op in ("min", "max"):
            prefix = "std::" if t != "U" else ""
            return "%s%s(%s, %s)" % (prefix, b_op, self.conv(a, t), self.conv(b, t))
        if b_op == "/":
            return "(%s / %s)" % (self.conv(a, t), self.conv(b, t))
        if b_op == "//":
            if t == "std::int64_t":
                return _NS + "floor_div(%s, %s)" % (self.conv(a, t), self.conv(b, t))
            return "std::floor(%s / %s)" % (self.conv(a, t), self.conv(b, t))
        if b_op == "%":
            if t == "std::int64_t":
                return _NS + "floor_mod(%s, %s)" % (self.conv(a, t), self.conv(b, t))
            x, y = self.conv(a, t), self.conv(b, t)
            return "(%s - std::floor(%s / %s) * %s)" % (x, x, y, y)
        if b_op == "**":
            if t == "std::int64_t":
                return _NS + "int_pow(%s, %s)" % (self.conv(a, t), self.conv(b, t))
            if t in ("double", "float"):
                return "std::pow(%s, %s)" % (self.conv(a, t), self.conv(b, t))
            if not b.diff and b.op == "const" and b.args[0] in (0, 1, 2, 3):
                x = self.conv(a, "U")
                return {0: "U(1)", 1: x, 2: "(%s * %s)" % (x, x), 3: "(%s * %s * %s)" % (x, x, x)}[b.args[0]]
            if not b.diff and b.op == "const" and b.args[0] == 0.5:
                return "sqrt(%s)" % self.conv(a, "U")
            return "exp(%s * log(%s))" % (self.conv(b, "U"), self.conv(a, "U"))
        return "(%s %s %s)" % (self.conv(a, t), b_op, self.conv(b, t))

    def body(self, result, captures, returns, memos=(), cut=None, indent="    ", live_out=None):
        """The statements computing result. memos: [(N, D)] read from tables m<k> instead of
        computed; cut: a node given as the variable d (a memo's own function)."""
        memo_of = {n.id: (k, d) for k, (n, d) in enumerate(memos)}
        live, stack = set(), [result]
        while stack:
            n = stack.pop()
            if n.id in live:
                continue
            live.add(n.id)
            if n is cut or n.op == "const":
                continue
            if n.id in memo_of:
                stack.append(memo_of[n.id][1])
            else:
                stack.extend(a for a in n.args if hasattr(a, "tracer"))
        lines = []
        for n in self.tracer.nodes:
            if n.id not in live:
                continue
            if n is cut:
                value = "d"
            elif n.id in memo_of:
                k, d = memo_of[n.id]
                value = "m%d ? (*m%d)[std::size_t(std::clamp(v%d, m%d_lo, m%d_hi) - m%d_lo)] : m%d_value(v%d)" % (
                    k, k, d.id, k, k, k, k, d.id)
            else:
                value = self.expression(n, captures)
            unused = "[[maybe_unused]] " if n.op == "const" else ""  # an exponent folded into products
            lines.append("%s%sconst %s v%d = %s;" % (indent, unused, self.type_of(n), n.id, value))
        if live_out is not None:  # the caller goes on with these values (a backward)
            live_out.update(live)
            for n in self.tracer.nodes:
                if n.id in live and n.op == "capture" and captures[n.args[0]].learns:
                    index = ", ".join(self.conv(i, "std::int64_t") for i in n.args[1:])
                    lines.append("%sconst std::size_t x%d = c%d.index(%s);" % (indent, n.id, n.args[0], index))
            return "\n".join(lines)
        lines.append("%sreturn %s;" % (indent, self.conv(result, returns)))
        return "\n".join(lines)

    def adjoints(self, result, live, captures, indent):
        """Reverse mode over the differentiated nodes: each one's adjoint a<id>, the score's into
        g[c], the learning captures' added into dp at their slots."""
        diff = [n for n in self.tracer.nodes if n.id in live and n.diff]
        lines = ["%s[[maybe_unused]] T a%d = T(0);" % (indent, n.id) for n in diff if n is not result]
        lines.append("%s(void)v%d;" % (indent, result.id))
        lines.append("%sT a%d = g[c];" % (indent, result.id) if result.diff else "%sg[c] = T(0);" % indent)
        offsets, total = {}, []
        for c in captures:
            if c.learns:
                offsets[c.slot] = " + ".join(total) or "0"
                total.append("c%d.values.size()" % c.slot)

        def add(x, term):
            if x.diff:
                lines.append("%sa%d += %s;" % (indent, x.id, term))

        for n in reversed(diff):
            a, v = "a%d" % n.id, "v%d" % n.id
            if n.op == "input":
                lines.append("%sg[c] = %s;" % (indent, a))
            elif n.op == "capture":
                lines.append("%sdp[%s + x%d] += %s;" % (indent, offsets[n.args[0]], n.id, a))
            elif n.op == "cast":
                add(n.args[1], a)
            elif n.op == "where":
                c, x, y = n.args
                if x.diff:
                    lines.append("%sif (v%d) a%d += %s;" % (indent, c.id, x.id, a))
                if y.diff:
                    lines.append("%sif (!v%d) a%d += %s;" % (indent, c.id, y.id, a))
            elif n.op == "unary":
                u, x = n.args
                xv = self.conv(x, "T")
                term = {"neg": "-%s" % a, "abs": "(%s < T(0) ? -%s : %s)" % (xv, a, a), "exp": "%s * %s" % (a, v),
                        "log": "%s / %s" % (a, xv), "sqrt": "(%s == T(0) ? T(0) : %s / (T(2) * %s))" % (v, a, v),
                        "tanh": "%s * (T(1) - %s * %s)" % (a, v, v), "sigmoid": "%s * %s * (T(1) - %s)" % (a, v, v),
                        "sign": None, "floor": None, "ceil": None}[u]
                if term:
                    add(x, term)
            elif n.op == "binary":
                op, x, y = n.args
                xv, yv = self.conv(x, "T"), self.conv(y, "T")
                if op == "+":
                    add(x, a), add(y, a)
                elif op == "-":
                    add(x, a), add(y, "-" + a)
                elif op == "*":
                    add(x, "%s * %s" % (a, yv)), add(y, "%s * %s" % (a, xv))
                elif op == "/":
                    add(x, "%s / %s" % (a, yv)), add(y, "-%s * %s / (%s * %s)" % (a, xv, yv, yv))
                elif op in ("min", "max"):
                    first = "%s %s %s" % (xv, "<=" if op == "min" else ">=", yv)
                    if x.diff:
                        lines.append("%sif (%s) a%d += %s;" % (indent, first, x.id, a))
                    if y.diff:
                        lines.append("%sif (!(%s)) a%d += %s;" % (indent, first, y.id, a))
                elif op == "**":
                    add(x, "%s * %s * std::pow(%s, %s - T(1))" % (a, yv, xv, yv))
                    add(y, "%s * %s * std::log(%s)" % (a, v, xv))
        if not any(n.op == "input" for n in diff):  # the result does not depend on the score
            lines.append("%sg[c] = T(0);" % indent)
        return "\n".join(lines)

    def backward_row(self, result, captures, memos):
        """The modifier's own backward of a row: the forward again on plain numbers, then adjoints."""
        live = set()
        forward = self.body(result, captures, "U", memos, indent="      ", live_out=live)
        learns = any(c.learns for c in captures)
        return ("  template <class T>\n"
                "  void backward_row(const T* s, T* g, std::size_t n, std::size_t b_, std::size_t h_, std::size_t i_,\n"
                "                    std::size_t j0, T* dp) const {\n"
                "    using U = T;\n%s    (void)b_, (void)h_, (void)dp;\n"
                "    for (std::size_t c = 0; c < n; ++c) {\n"
                "      if (g[c] == T(0)) continue;  // hidden, or no gradient\n"
                "      const T s_ = s[c];\n      const std::size_t q_idx_ = i_, kv_idx_ = j0 + c;\n"
                "      (void)s_, (void)q_idx_, (void)kv_idx_;\n%s\n%s\n    }\n  }\n"
                % (_USING, forward, self.adjoints(result, live, captures, "      ")))

    def memo_members(self, memos, captures):
        """Each memo's table, its bounds, its function and the bind() that fills the tables."""
        out = []
        for k, (n, d) in enumerate(memos):
            t = self.type_of(n)
            out.append("  std::int64_t m%d_lo = 0, m%d_hi = -1;  // the table's range of v%d" % (k, k, d.id))
            out.append("  std::shared_ptr<const std::vector<%s>> m%d;" % (t, k))
            out.append("  %s m%d_value(std::int64_t d) const {\n%s    (void)d;\n%s\n  }"
                       % (t, k, _USING, self.body(n, captures, t, cut=d)))
        if memos:
            out.append("  score_fn bind(const xattn::problem&) const {\n    score_fn f = *this;")
            for k, (n, d) in enumerate(memos):
                t = self.type_of(n)
                out.append("    if (m%d_hi >= m%d_lo) {\n      auto t = std::make_shared<std::vector<%s>>();\n"
                           "      t->reserve(std::size_t(m%d_hi - m%d_lo + 1));\n"
                           "      for (std::int64_t d = m%d_lo; d <= m%d_hi; ++d) t->push_back(m%d_value(d));\n"
                           "      f.m%d = std::move(t);\n    }" % (k, k, t, k, k, k, k, k, k))
            out.append("    return f;\n  }")
        return "\n".join(out)


def _members(captures):
    out = []
    for c in captures:
        if c.learns:
            out.append("  " + _NS + "table c%d;" % c.slot)
        else:
            out.append("  " + _NS + "captured<%s> c%d;" % ("double" if c.kind == FLOAT else "std::int64_t", c.slot))
    return "\n".join(out)


def _make(name, captures, memos=()):
    lines = ["inline %s make_%s(const xattn_tensor* c) {" % (name, name), "  %s f;" % name]
    if memos:  # after the captures: the tables' bounds, (memos, 2) int64
        lines.append("  const auto bounds = %scapture<std::int64_t>(c[%d]);" % (_NS, len(captures)))
        for k in range(len(memos)):
            lines.append("  f.m%d_lo = bounds(%d, 0), f.m%d_hi = bounds(%d, 1);" % (k, k, k, k))
    for c in captures:
        if c.learns:
            lines.append("  f.c%d = %slearn(c[%d]);" % (c.slot, _NS, c.slot))
        else:
            lines.append("  f.c%d = %scapture<%s>(c[%d]);" % (c.slot, _NS, "double" if c.kind == FLOAT else
                                                               "std::int64_t", c.slot))
    lines += ["  (void)c;", "  return f;", "}"]
    return "\n".join(lines)


_USING = "    using std::abs; using std::exp; using std::log; using std::sqrt; using std::tanh;\n"


def score_struct(tracer, result):
    """struct score_fn: the traced score_mod as a modifier, its learning captures as tables, its
    costly index arithmetic as tables made once per call."""
    w = _Writer(tracer)
    memos = memo_plan(tracer, result)
    learning = [c for c in tracer.captures if c.learns]
    tables = ", ".join("c%d.values" % c.slot for c in learning)
    params = "  auto parameters() const { return std::tie(%s); }\n" % tables if learning else ""
    return ("struct score_fn {\n%s\n%s\n  template <class U>\n"
            "  U operator()(U s_, std::size_t b_, std::size_t h_, std::size_t q_idx_, std::size_t kv_idx_) const {\n"
            "%s    (void)s_, (void)b_, (void)h_, (void)q_idx_, (void)kv_idx_;\n%s\n  }\n%s%s};\n%s\n"
            % (_members(tracer.captures), w.memo_members(memos, tracer.captures), _USING,
               w.body(result, tracer.captures, "U", memos), w.backward_row(result, tracer.captures, memos), params,
               _make("score_fn", tracer.captures, memos)))


def mask_struct(tracer, result):
    """struct mask_fn: the traced mask_mod as a predicate."""
    w = _Writer(tracer)
    return ("struct mask_fn {\n%s\n"
            "  bool operator()(std::size_t b_, std::size_t h_, std::size_t q_idx_, std::size_t kv_idx_) const {\n"
            "%s    (void)b_, (void)h_, (void)q_idx_, (void)kv_idx_;\n%s\n  }\n};\n%s\n"
            % (_members(tracer.captures), _USING, w.body(result, tracer.captures, "bool"),
               _make("mask_fn", tracer.captures)))


_GLUE = """#include <xattn/c_api/flex.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <tuple>
#include <vector>

namespace xattn_flex {
%(score)s
%(mask)s
using score_type = %(score_type)s;
using mask_type = %(mask_type)s;
using T = %(element)s;
}  // namespace xattn_flex

extern "C" {
XATTN_API xattn_status xattn_flex_forward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                                          const xattn_attention_desc* desc, xattn_tensor* out, xattn_tensor* lse,
                                          const xattn_tensor* score_captures, const xattn_tensor* mask_captures,
                                          const xattn_tensor* kinds, const xattn_tensor* spans, int64_t q_block,
                                          int64_t kv_block) {
  return xattn::c_api::guarded([&] {
%(bind)s
    xattn::c_api::flex::forward<xattn_flex::score_type, xattn_flex::mask_type, xattn_flex::T>(q, k, v, desc, out, lse,
                                                                                            mod, masks);
  });
}
XATTN_API xattn_status xattn_flex_backward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                                           const xattn_attention_desc* desc, const xattn_tensor* out,
                                           const xattn_tensor* lse, const xattn_tensor* d_out, xattn_tensor* dq,
                                           xattn_tensor* dk, xattn_tensor* dv, const xattn_tensor* score_captures,
                                           const xattn_tensor* mask_captures, const xattn_tensor* kinds,
                                           const xattn_tensor* spans, int64_t q_block, int64_t kv_block,
                                           double* d_tables) {
  return xattn::c_api::guarded([&] {
%(bind)s
    xattn::c_api::flex::backward<xattn_flex::score_type, xattn_flex::mask_type, xattn_flex::T>(
        q, k, v, desc, out, lse, d_out, dq, dk, dv, mod, masks, d_tables);
  });
}
XATTN_API const char* xattn_flex_last_error(void) { return xattn::c_api::last_error().c_str(); }
}
"""


def source(score, mask, double):
    """The library's C++: score and mask are (tracer, result) or None; double: float64 accumulation."""
    bind = []
    if score:
        bind.append("    const auto mod_value = xattn_flex::make_score_fn(score_captures);\n"
                    "    const auto* mod = &mod_value;")
    else:
        bind.append("    const void* mod = nullptr;\n    (void)score_captures;")
    if mask:
        bind.append("    const auto mask_value = xattn::c_api::flex::block_table(kinds, spans, q_block, kv_block, "
                    "xattn_flex::make_mask_fn(mask_captures));\n    const auto* masks = &mask_value;")
    else:
        bind.append("    const xattn::block_mask_policy<void>* masks = nullptr;\n"
                    "    (void)mask_captures, (void)kinds, (void)spans, (void)q_block, (void)kv_block;")
    return _GLUE % {"score": score_struct(*score) if score else "", "mask": mask_struct(*mask) if mask else "",
                    "score_type": "score_fn" if score else "void", "mask_type": "mask_fn" if mask else "void",
                    "element": "double" if double else "float", "bind": "\n".join(bind)}
