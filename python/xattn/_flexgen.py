"""C++ from traced functions: a score modifier op(s, b, h, i, j) generic over its scalar U (the
fused pass differentiates it on dual numbers and param_dual) and a mask predicate f(b, h, i, j),
with the glue xattn.flex loads through ctypes. The source is a function of the traced graph only,
so it is also the cache key of the compiled library."""

import math

from ._trace import BOOL, FLOAT, INT

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


class _Writer:
    def __init__(self, tracer):
        self.tracer = tracer

    def type_of(self, n):
        if n.kind == BOOL:
            return "bool"
        if n.kind == INT:
            return "std::int64_t"
        return "U" if n.diff else "double"

    def conv(self, n, to):
        """Node n's variable as C++ type `to`."""
        have = self.type_of(n)
        name = "v%d" % n.id
        if have == to:
            return name
        if to == "bool":
            return "(%s != 0)" % name
        return "%s(%s)" % (to, name)

    def float_type(self, *nodes):
        return "U" if any(n.diff for n in nodes) else "double"

    def common(self, a, b):
        if a.diff or b.diff:
            return "U"
        if FLOAT in (a.kind, b.kind):
            return "double"
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
            kind, a = args
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
            if t == "double":
                if u == "sigmoid":
                    return "(1.0 / (1.0 + std::exp(-%s)))" % x
                if u == "sign":
                    return "double((%s > 0) - (%s < 0))" % (x, x)
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
            ft = self.float_type(a, b)
            return "(%s / %s)" % (self.conv(a, ft), self.conv(b, ft))
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
            if t == "double":
                return "std::pow(%s, %s)" % (self.conv(a, t), self.conv(b, t))
            if not b.diff and b.op == "const" and b.args[0] in (0, 1, 2, 3):
                x = self.conv(a, "U")
                return {0: "U(1)", 1: x, 2: "(%s * %s)" % (x, x), 3: "(%s * %s * %s)" % (x, x, x)}[b.args[0]]
            if not b.diff and b.op == "const" and b.args[0] == 0.5:
                return "sqrt(%s)" % self.conv(a, "U")
            return "exp(%s * log(%s))" % (self.conv(b, "U"), self.conv(a, "U"))
        return "(%s %s %s)" % (self.conv(a, t), b_op, self.conv(b, t))

    def body(self, result, captures, returns):
        live, stack = set(), [result]
        while stack:
            n = stack.pop()
            if n.id in live:
                continue
            live.add(n.id)
            if n.op != "const":
                stack.extend(a for a in n.args if hasattr(a, "tracer"))
        lines = []
        for n in self.tracer.nodes:
            if n.id in live:
                unused = "[[maybe_unused]] " if n.op == "const" else ""  # an exponent folded into products
                lines.append("    %sconst %s v%d = %s;" % (unused, self.type_of(n), n.id, self.expression(n, captures)))
        lines.append("    return %s;" % self.conv(result, returns))
        return "\n".join(lines)


def _members(captures):
    out = []
    for c in captures:
        if c.learns:
            out.append("  " + _NS + "table c%d;" % c.slot)
        else:
            out.append("  " + _NS + "captured<%s> c%d;" % ("double" if c.kind == FLOAT else "std::int64_t", c.slot))
    return "\n".join(out)


def _make(name, captures):
    lines = ["inline %s make_%s(const xattn_tensor* c) {" % (name, name), "  %s f;" % name]
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
    """struct score_fn: the traced score_mod as a modifier, its learning captures as tables."""
    w = _Writer(tracer)
    learning = [c for c in tracer.captures if c.learns]
    params = ("  auto parameters() const { return std::tie(%s); }\n" % ", ".join("c%d.values" % c.slot for c in learning)
              if learning else "")
    return ("struct score_fn {\n%s\n  template <class U>\n"
            "  U operator()(U s_, std::size_t b_, std::size_t h_, std::size_t q_idx_, std::size_t kv_idx_) const {\n"
            "%s    (void)s_, (void)b_, (void)h_, (void)q_idx_, (void)kv_idx_;\n%s\n  }\n%s};\n%s\n"
            % (_members(tracer.captures), _USING, w.body(result, tracer.captures, "U"), params,
               _make("score_fn", tracer.captures)))


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
#include <tuple>

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
                                          const xattn_tensor* kinds, int64_t q_block, int64_t kv_block) {
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
                                           int64_t q_block, int64_t kv_block, double* d_tables) {
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
        bind.append("    const auto mask_value = xattn::c_api::flex::block_table(kinds, q_block, kv_block, "
                    "xattn_flex::make_mask_fn(mask_captures));\n    const auto* masks = &mask_value;")
    else:
        bind.append("    const xattn::block_mask_policy<void>* masks = nullptr;\n"
                    "    (void)mask_captures, (void)kinds, (void)q_block, (void)kv_block;")
    return _GLUE % {"score": score_struct(*score) if score else "", "mask": mask_struct(*mask) if mask else "",
                    "score_type": "score_fn" if score else "void", "mask_type": "mask_fn" if mask else "void",
                    "element": "double" if double else "float", "bind": "\n".join(bind)}
