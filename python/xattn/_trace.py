"""The tracer behind xattn.flex: a score_mod or mask_mod called once on proxy values records the
expression it computes (a graph of Nodes), which becomes the C++ body of a score modifier or a
mask predicate. Python numbers, captured tensors indexed by traced integers, arithmetic,
comparisons and a list of torch functions are recorded; anything else raises TraceError naming
the construct and the line of the user's function."""

import collections
import functools
import hashlib
import inspect
import math
import os
import types

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))


class TraceError(TypeError):
    """A score_mod or mask_mod uses something flex_attention cannot compile."""


def _user_line():
    """'file:line' of the innermost frame outside this package and torch: the user's code."""
    frame = inspect.currentframe()
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_HERE) and not path.startswith(_TORCH):
            return "%s, line %d" % (os.path.basename(path), frame.f_lineno)
        frame = frame.f_back
    return "an unknown line"


def _fail(tracer, what):
    raise TraceError("flex_attention: %s (in %s at %s)" % (what, tracer.name, _user_line()))


BOOL, INT, FLOAT = "bool", "int", "float"
_RANK = {BOOL: 0, INT: 1, FLOAT: 2}


def _float_dtype(d):
    return d in (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class Node:
    """One traced value: op with its arguments (Nodes or Python constants), its kind (bool, int or
    float) and whether it depends on the score or on a captured tensor that learns (diff)."""

    __slots__ = ("tracer", "op", "args", "kind", "diff", "id")

    def __init__(self, tracer, op, args, kind, diff):
        self.tracer, self.op, self.args, self.kind, self.diff = tracer, op, tuple(args), kind, diff
        self.id = len(tracer.nodes)
        tracer.nodes.append(self)

    # arithmetic
    def __add__(self, o): return self.tracer.binary("+", self, o)
    def __radd__(self, o): return self.tracer.binary("+", o, self)
    def __sub__(self, o): return self.tracer.binary("-", self, o)
    def __rsub__(self, o): return self.tracer.binary("-", o, self)
    def __mul__(self, o): return self.tracer.binary("*", self, o)
    def __rmul__(self, o): return self.tracer.binary("*", o, self)
    def __truediv__(self, o): return self.tracer.binary("/", self, o)
    def __rtruediv__(self, o): return self.tracer.binary("/", o, self)
    def __floordiv__(self, o): return self.tracer.binary("//", self, o)
    def __rfloordiv__(self, o): return self.tracer.binary("//", o, self)
    def __mod__(self, o): return self.tracer.binary("%", self, o)
    def __rmod__(self, o): return self.tracer.binary("%", o, self)
    def __pow__(self, o): return self.tracer.binary("**", self, o)
    def __rpow__(self, o): return self.tracer.binary("**", o, self)
    def __neg__(self): return self.tracer.unary("neg", self)
    def __pos__(self): return self
    def __abs__(self): return self.tracer.unary("abs", self)
    def __invert__(self): return self.tracer.unary("not", self)
    # comparisons and logic
    def __lt__(self, o): return self.tracer.binary("<", self, o)
    def __le__(self, o): return self.tracer.binary("<=", self, o)
    def __gt__(self, o): return self.tracer.binary(">", self, o)
    def __ge__(self, o): return self.tracer.binary(">=", self, o)
    def __eq__(self, o): return self.tracer.binary("==", self, o)
    def __ne__(self, o): return self.tracer.binary("!=", self, o)
    def __and__(self, o): return self.tracer.binary("&", self, o)
    def __rand__(self, o): return self.tracer.binary("&", o, self)
    def __or__(self, o): return self.tracer.binary("|", self, o)
    def __ror__(self, o): return self.tracer.binary("|", o, self)
    def __xor__(self, o): return self.tracer.binary("^", self, o)
    def __rxor__(self, o): return self.tracer.binary("^", o, self)
    __hash__ = object.__hash__

    # methods a tensor has
    def abs(self): return self.tracer.unary("abs", self)
    def exp(self): return self.tracer.unary("exp", self)
    def log(self): return self.tracer.unary("log", self)
    def sqrt(self): return self.tracer.unary("sqrt", self)
    def tanh(self): return self.tracer.unary("tanh", self)
    def sigmoid(self): return self.tracer.unary("sigmoid", self)
    def sign(self): return self.tracer.unary("sign", self)
    def floor(self): return self.tracer.unary("floor", self)
    def ceil(self): return self.tracer.unary("ceil", self)
    def clamp(self, min=None, max=None): return self.tracer.clamp(self, min, max)
    clip = clamp
    def minimum(self, o): return self.tracer.binary("min", self, o)
    def maximum(self, o): return self.tracer.binary("max", self, o)
    def float(self): return self.tracer.cast(self, FLOAT, 32)
    def double(self): return self.tracer.cast(self, FLOAT, 64)
    def long(self): return self.tracer.cast(self, INT)
    def int(self): return self.tracer.cast(self, INT)
    def bool(self): return self.tracer.cast(self, BOOL)

    def to(self, dtype, *rest, **kwargs):
        if not isinstance(dtype, torch.dtype):
            _fail(self.tracer, ".to(%r): only .to(dtype) is supported" % (dtype,))
        if dtype == torch.bool:
            return self.tracer.cast(self, BOOL)
        if _float_dtype(dtype):  # computed in float32 or float64, as torch would (16-bit ones in float32)
            return self.tracer.cast(self, FLOAT, 64 if dtype == torch.float64 else 32)
        return self.tracer.cast(self, INT)

    def __bool__(self):
        _fail(self.tracer, "Python `if`, `and`, `or`, `not` or bool() on a traced value (use torch.where, &, |, ~)")

    def __index__(self):
        _fail(self.tracer, "a traced value used as a Python int (index a captured tensor with it instead)")

    def __int__(self):
        _fail(self.tracer, "int() of a traced value (use .to(torch.int64))")

    def __float__(self):
        _fail(self.tracer, "float() of a traced value (use .to(torch.float32))")

    def __len__(self):
        _fail(self.tracer, "len() of a traced value (it is one number)")

    def __iter__(self):
        _fail(self.tracer, "iterating over a traced value (it is one number)")

    def __getitem__(self, i):
        _fail(self.tracer, "indexing a traced value (it is one number)")

    def __getattr__(self, name):
        _fail(self.tracer, "tensor method .%s is not supported" % name)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tracer = next(a.tracer for a in _flatten(args) if isinstance(a, Node))
        return tracer.torch_function(func, args, kwargs)


def _flatten(args):
    for a in args:
        if isinstance(a, (tuple, list)):
            yield from _flatten(a)
        else:
            yield a


_UNARY_TORCH = {"exp", "log", "tanh", "sigmoid", "sqrt", "abs", "sign", "floor", "ceil", "neg", "negative"}
_BINARY_TORCH = {"minimum": "min", "maximum": "max", "add": "+", "sub": "-", "mul": "*", "div": "/",
                 "remainder": "%", "floor_divide": "//", "pow": "**", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
                 "eq": "==", "ne": "!=", "logical_and": "&", "logical_or": "|"}


class Capture:
    """A tensor the function reads: its slot, whether its gradient is wanted (learns), its kind."""

    def __init__(self, tensor, slot, learns):
        self.tensor, self.slot, self.learns = tensor, slot, learns
        self.kind = FLOAT if _float_dtype(tensor.dtype) else BOOL if tensor.dtype == torch.bool else INT


class Tracer:
    """One traced function: its nodes in order of creation, the captures it read, its result."""

    def __init__(self, name, learning):
        self.name, self.learning = name, learning
        self.nodes, self.captures = [], []
        self._by_tensor = {}

    def const(self, x):
        if isinstance(x, Node):
            if x.tracer is not self:
                _fail(self, "a value traced in another function")
            return x
        if isinstance(x, bool):
            return Node(self, "const", (x,), BOOL, False)
        if isinstance(x, int):
            return Node(self, "const", (x,), INT, False)
        if isinstance(x, float):
            return Node(self, "const", (x,), FLOAT, False)
        if isinstance(x, torch.Tensor):
            if x.numel() != 1:
                _fail(self, "a captured tensor of shape %s used whole; index it with traced integers"
                      % (tuple(x.shape),))
            return self.lookup(x.reshape(()), ())
        _fail(self, "a %s value (only numbers, traced values and captured tensors are supported)" % type(x).__name__)

    def capture(self, tensor):
        c = self._by_tensor.get(id(tensor))
        if c is None:
            if tensor.is_complex() or tensor.device.type != "cpu":
                _fail(self, "a captured tensor must be a real tensor on the CPU, not %s on %s"
                      % (tensor.dtype, tensor.device))
            learns = self.learning and tensor.requires_grad and _float_dtype(tensor.dtype)
            c = Capture(tensor, len(self.captures), learns)
            self.captures.append(c)
            self._by_tensor[id(tensor)] = (c, tensor)  # the tensor kept alive: ids stay unique
            return c
        return c[0]

    def lookup(self, tensor, index):
        if tensor.dim() > 4:
            _fail(self, "a captured tensor of rank %d (at most 4)" % tensor.dim())
        if len(index) != tensor.dim():
            _fail(self, "a captured tensor of shape %s indexed with %d indices; give one integer per axis"
                  % (tuple(tensor.shape), len(index)))
        nodes = []
        for i in index:
            if isinstance(i, slice) or i is None or i is Ellipsis:
                _fail(self, "slicing a captured tensor; index it with one integer per axis")
            n = self.const(i)
            if n.kind == FLOAT:
                _fail(self, "a float used as an index (convert it with .to(torch.int64))")
            if n.diff:
                _fail(self, "an index that depends on the score")
            nodes.append(n)
        c = self.capture(tensor)
        return Node(self, "capture", (c.slot, *nodes), c.kind, c.learns)

    def binary(self, op, a, b):
        a, b = self.const(a), self.const(b)
        diff = a.diff or b.diff
        if op in ("<", "<=", ">", ">=", "==", "!="):
            kind = BOOL
        elif op in ("&", "|", "^"):
            if FLOAT in (a.kind, b.kind):
                _fail(self, "`%s` on a float" % op)
            kind = BOOL if a.kind == b.kind == BOOL else INT
            if diff:
                _fail(self, "`%s` on a value that depends on the score" % op)
        elif op == "/":
            kind = FLOAT
        else:
            kind = max(a.kind, b.kind, INT, key=_RANK.get) if op != "min" and op != "max" else max(
                a.kind, b.kind, key=_RANK.get)
        if op in ("//", "%") and diff:
            _fail(self, "`%s` on a value that depends on the score (it has no gradient)" % op)
        return Node(self, "binary", (op, a, b), kind, diff)

    def unary(self, op, a):
        a = self.const(a)
        if op == "negative":
            op = "neg"
        if op in ("floor", "ceil") and a.diff:
            _fail(self, "torch.%s of a value that depends on the score (it has no gradient)" % op)
        if op == "not":
            if a.kind == FLOAT:
                _fail(self, "`~` on a float")
            return Node(self, "unary", (op, a), a.kind, a.diff)
        if op in ("neg", "abs", "sign", "floor", "ceil"):
            kind = INT if a.kind == BOOL and op != "floor" and op != "ceil" else a.kind
        else:
            kind = FLOAT
        return Node(self, "unary", (op, a), kind, a.diff)

    def cast(self, a, kind, bits=None):
        a = self.const(a)
        if kind != FLOAT and a.diff:
            _fail(self, "converting a value that depends on the score to %s" % kind)
        if a.kind == kind and (bits is None or a.diff):
            return a
        return Node(self, "cast", (kind, a, bits), kind, a.diff)

    def clamp(self, a, lo, hi):
        if lo is not None:
            a = self.binary("max", a, lo)
        if hi is not None:
            a = self.binary("min", a, hi)
        return a

    def where(self, c, a, b):
        c, a, b = self.const(c), self.const(a), self.const(b)
        if c.kind != BOOL:
            c = self.binary("!=", c, 0)
        kind = max(a.kind, b.kind, key=_RANK.get)
        return Node(self, "where", (c, a, b), kind, a.diff or b.diff)

    def torch_function(self, func, args, kwargs):
        name = getattr(func, "__name__", str(func))
        if name == "__getitem__":
            tensor, index = args
            if isinstance(tensor, Node):
                _fail(self, "indexing a traced value (it is one number)")
            return self.lookup(tensor, index if isinstance(index, tuple) else (index,))
        if name == "where":
            if len(args) + len(kwargs) != 3:
                _fail(self, "torch.where needs (condition, input, other)")
            c, a, b = (list(args) + [kwargs.get(k) for k in ("condition", "input", "other")[len(args):]])
            return self.where(c, a, b)
        if name in ("clamp", "clip"):
            x = args[0]
            lo = args[1] if len(args) > 1 else kwargs.get("min")
            hi = args[2] if len(args) > 2 else kwargs.get("max")
            return self.clamp(x, lo, hi)
        if kwargs:
            _fail(self, "torch.%s with keyword arguments %s" % (name, sorted(kwargs)))
        bare = name.strip("_")
        if bare.startswith("r") and bare[1:] in _BINARY_TORCH and len(args) == 2:  # __radd__ and friends
            return self.binary(_BINARY_TORCH[bare[1:]], args[1], args[0])
        if bare in _UNARY_TORCH and len(args) == 1:
            return self.unary(bare, args[0])
        if bare in _BINARY_TORCH and len(args) == 2:
            return self.binary(_BINARY_TORCH[bare], args[0], args[1])
        if bare in ("and", "or", "xor") and len(args) == 2:
            return self.binary({"and": "&", "or": "|", "xor": "^"}[bare], args[0], args[1])
        if bare == "truediv" and len(args) == 2:
            return self.binary("/", args[0], args[1])
        if bare == "floordiv" and len(args) == 2:
            return self.binary("//", args[0], args[1])
        if bare == "mod" and len(args) == 2:
            return self.binary("%", args[0], args[1])
        _fail(self, "torch.%s is not supported in score_mod / mask_mod" % name)


def trace(fn, argument_names, kinds, learning, name):
    """Trace fn on proxies for its arguments (kinds: FLOAT for the score, INT for indices): the
    Tracer and the result's Node."""
    tracer = Tracer(name, learning)
    args = [Node(tracer, "input", (n,), k, k == FLOAT) for n, k in zip(argument_names, kinds)]
    try:
        result = fn(*args)
    except TraceError:
        raise
    result = tracer.const(result)
    return tracer, result


def precisions(tracer):
    """The bits (32 or 64) each float node that does not depend on the score is computed in, by
    torch's promotion: a float tensor keeps its dtype, integers turned float take the default
    dtype, a Python float adopts the other operand's (None: only Python numbers met)."""
    default = 64 if torch.get_default_dtype() == torch.float64 else 32
    bits = {}
    for n in tracer.nodes:
        b = None
        if n.kind == FLOAT:
            if n.op == "capture":
                b = 64 if tracer.captures[n.args[0]].tensor.dtype == torch.float64 else 32
            elif n.op == "cast":
                b = n.args[2] or (bits.get(n.args[1].id) if n.args[1].kind == FLOAT else default)
            elif n.op in ("binary", "unary", "where"):
                operands = [a for a in n.args if isinstance(a, Node)]
                if n.op == "where":
                    operands = operands[1:]  # the condition's type does not promote
                known = [bits[a.id] for a in operands if a.kind == FLOAT and bits.get(a.id)]
                if known:
                    b = max(known)
                elif any(a.kind != FLOAT and a.op != "const" for a in operands):
                    b = default
                elif any(a.kind != FLOAT for a in operands) and n.op == "binary" and n.args[0] == "/":
                    b = default
        bits[n.id] = b
    return bits


def graph_key(tracer, result):
    """What the generated code depends on, hashable: every node's operation, arguments, kind and
    whether it is differentiated, the captures' kinds, and the result."""
    def arg(a):
        if isinstance(a, Node):
            return ("n", a.id)
        return (type(a).__name__, a)  # 1 and 1.0 and True stay apart
    nodes = tuple((n.op, tuple(arg(a) for a in n.args), n.kind, n.diff) for n in tracer.nodes)
    return nodes, tuple((c.kind, c.learns) for c in tracer.captures), result.id


# ---- a traced function kept while nothing it can read changes ----------------------------------

def _value_key(v, depth):
    """What of v a trace depends on, or None when it cannot be seen into (an object whose
    attributes could change unseen): then the function is traced on every call."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return (type(v).__name__, v)
    if isinstance(v, torch.Tensor):  # its values too (_version), in case the function read one as a number
        return ("tensor", id(v), v._version, v.dtype, tuple(v.shape), v.requires_grad)
    if isinstance(v, (types.ModuleType, types.BuiltinFunctionType)) or isinstance(v, type):
        return ("object", id(v))
    if isinstance(v, types.FunctionType):
        return fingerprint(v, depth + 1)
    if isinstance(v, tuple):
        keys = tuple(_value_key(x, depth) for x in v)
        return None if any(k is None for k in keys) else keys
    if isinstance(v, torch.dtype):
        return ("dtype", str(v))
    return None


@functools.lru_cache(maxsize=256)
def _names(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= set(_names(c))
    return tuple(sorted(names))


def fingerprint(fn, depth=0):
    """A key that changes whenever anything fn can read changes (its code, its closure, the
    globals it names, its defaults, recursively through the functions it calls), or None."""
    code = getattr(fn, "__code__", None)
    if depth > 8 or code is None or not isinstance(fn, types.FunctionType):
        return None
    parts = [("code", id(code))]
    cells = fn.__closure__ or ()
    for name, cell in zip(code.co_freevars, cells):
        try:
            value = cell.cell_contents
        except ValueError:  # not yet bound
            return None
        k = _value_key(value, depth)
        if k is None:
            return None
        parts.append((name, k))
    glob, builtins = fn.__globals__, fn.__globals__.get("__builtins__")
    for name in _names(code):
        if name in glob:
            k = _value_key(glob[name], depth)
            if k is None:
                return None
            parts.append((name, k))
        elif not (isinstance(builtins, dict) and name in builtins) and not hasattr(builtins, name):
            parts.append((name, "attribute"))  # an attribute name (x.abs, torch.where): fixed by its object
    for d in (fn.__defaults__ or ()) + tuple((fn.__kwdefaults__ or {}).values()):
        k = _value_key(d, depth)
        if k is None:
            return None
        parts.append(("default", k))
    parts.append(("code object", code))  # kept alive: ids stay unique while cached
    return tuple(parts)


class Traced:
    """A traced function: its tracer and result, a digest of its graph (the key of its compiled
    code) and its index ranges checked per problem size."""

    def __init__(self, tracer, result):
        self.tracer, self.result = tracer, result
        self.key = hashlib.sha256(repr(graph_key(tracer, result)).encode()).hexdigest()
        self._checked = {}

    def check_indices(self, sizes):
        """check_indices() for these sizes, remembered with the integer captures' versions: the
        ranges of the nodes."""
        ints = [c.tensor for c in self.tracer.captures if c.kind != FLOAT]
        key = (tuple(sorted(sizes.items())), tuple((id(t), t._version) for t in ints))
        r = self._checked.get(key)
        if r is None:
            r = check_indices(self.tracer, sizes, [c.tensor for c in self.tracer.captures])
            if len(self._checked) > 64:
                self._checked.clear()
            self._checked[key] = r
        return r


_traced = collections.OrderedDict()


def traced(fn, argument_names, kinds, learning, name):
    """trace(...) as a Traced, reused while fingerprint(fn) stays the same."""
    fp = fingerprint(fn)
    key = (fp, argument_names, learning) if fp is not None else None
    if key is not None and key in _traced:
        _traced.move_to_end(key)
        return _traced[key]
    t = Traced(*trace(fn, argument_names, kinds, learning, name))
    if key is not None:
        _traced[key] = t
        if len(_traced) > 64:
            _traced.popitem(last=False)
    return t


# ---- ranges of integer values: an index out of a capture's range fails before anything runs ----

def _interval(op, x, y=None):
    lo1, hi1 = x
    if op == "+":
        return lo1 + y[0], hi1 + y[1]
    if op == "-":
        return lo1 - y[1], hi1 - y[0]
    if op in ("*", "min", "max"):
        f = {"*": lambda a, b: 0.0 if a == 0 or b == 0 else a * b, "min": min, "max": max}[op]
        if op != "*":
            return f(lo1, y[0]), f(hi1, y[1])
        c = [f(a, b) for a in (lo1, hi1) for b in y]
        return min(c), max(c)
    raise KeyError(op)


def _narrowed(cond, x, out, taken):
    """x's range where cond is `taken`, when cond compares x itself with a constant
    (torch.where(n < 8, n, ...): the first branch only sees n < 8)."""
    lo, hi = out[x.id]
    if cond.op != "binary" or cond.args[0] not in ("<", "<=", ">", ">="):
        return lo, hi
    op, a, b = cond.args
    if b is x and a.op == "const":  # c < x  is  x > c
        op, a, b = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op], b, a
    if a is not x or b.op != "const":
        return lo, hi
    c = b.args[0]
    if not taken:
        op = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}[op]
    integral = x.kind != FLOAT and float(c).is_integer()
    if op == "<":
        hi = min(hi, c - 1 if integral else c)
    elif op == "<=":
        hi = min(hi, c)
    elif op == ">":
        lo = max(lo, c + 1 if integral else c)
    else:
        lo = max(lo, c)
    return lo, hi


def ranges(tracer, sizes, captured):
    """The (lo, hi) of every int or bool node given sizes {b, h, q_idx, kv_idx: count} and the
    captured tensors' values; unknown ranges are infinite."""
    inf = math.inf
    out = {}
    for n in tracer.nodes:
        r = (-inf, inf)
        if n.op == "input":
            count = sizes.get(n.args[0])
            r = (0, count - 1) if count is not None else (-inf, inf)
        elif n.op == "const":
            r = (n.args[0], n.args[0])
        elif n.op == "capture":
            t = captured[n.args[0]]
            if n.kind != FLOAT and t.numel() > 0:  # floats index nothing: their range is not needed
                r = (int(t.min()), int(t.max()))
        elif n.op == "cast":
            a = out[n.args[1].id]  # float32 rounding moves a bound by far less than an integer
            if n.kind == BOOL:
                r = (0, 1)
            elif n.kind == INT:
                r = tuple(math.trunc(v) if math.isfinite(v) else (-2 ** 63 if v < 0 else 2 ** 63 - 1) for v in a)
            else:
                r = a
        elif n.op == "where":
            c = n.args[0]
            a, b = _narrowed(c, n.args[1], out, True), _narrowed(c, n.args[2], out, False)
            r = (min(a[0], b[0]), max(a[1], b[1]))
        elif n.op == "unary":
            op, a = n.args[0], out[n.args[1].id]
            if op == "neg":
                r = (-a[1], -a[0])
            elif op == "abs":
                r = (0 if a[0] <= 0 <= a[1] else min(abs(a[0]), abs(a[1])), max(abs(a[0]), abs(a[1])))
            elif op == "not":
                r = (0, 1) if n.kind == BOOL else (-a[1] - 1, -a[0] - 1)
            elif op in ("floor", "ceil"):
                f = math.floor if op == "floor" else math.ceil
                r = tuple(f(v) if math.isfinite(v) else v for v in a)
            elif op == "sign":
                r = (-1, 1)
            elif op in ("exp", "log", "sqrt", "tanh", "sigmoid"):
                f = {"exp": lambda v: math.exp(min(v, 700)), "log": lambda v: math.log(v) if v > 0 else -inf,
                     "sqrt": lambda v: math.sqrt(v) if v > 0 else 0.0, "tanh": math.tanh,
                     "sigmoid": lambda v: 1 / (1 + math.exp(-max(min(v, 700), -700)))}[op]
                r = (f(a[0]) if math.isfinite(a[0]) else f(max(a[0], -1e300)),
                     f(a[1]) if math.isfinite(a[1]) else (inf if op in ("exp", "log", "sqrt") else 1.0))
        elif n.op == "binary":
            op, a, b = n.args[0], out[n.args[1].id], out[n.args[2].id]
            if n.kind == BOOL:
                r = (0, 1)
            elif op in ("+", "-", "*", "min", "max"):
                try:
                    r = _interval(op, a, b)
                except (OverflowError, ValueError):
                    r = (-inf, inf)
                if any(math.isnan(v) for v in r):
                    r = (-inf, inf)
            elif op == "//" and b[0] == b[1] and b[0] > 0 and all(math.isfinite(v) for v in a):
                r = (a[0] // b[0], a[1] // b[0])
            elif op == "%" and b[0] == b[1] and b[0] > 0:
                r = (0, b[0] - 1) if n.kind == INT else (0, b[0])
            elif op in ("&",) and n.kind == INT and min(a[0], b[0]) >= 0:
                r = (0, min(a[1], b[1]))
        out[n.id] = r
    return out


def _describe(n, depth=0):
    """The expression of node n, as Python would write it (for messages)."""
    if depth > 6:
        return "..."
    if n.op == "input":
        return n.args[0]
    if n.op == "const":
        return repr(n.args[0])
    if n.op == "capture":
        return "captured%d[%s]" % (n.args[0], ", ".join(_describe(i, depth + 1) for i in n.args[1:]))
    if n.op == "binary":
        return "(%s %s %s)" % (_describe(n.args[1], depth + 1), n.args[0], _describe(n.args[2], depth + 1))
    if n.op == "unary":
        return "%s(%s)" % (n.args[0], _describe(n.args[1], depth + 1))
    if n.op == "cast":
        return "(%s).to(%s)" % (_describe(n.args[1], depth + 1), n.args[0])
    return "where(%s)" % ", ".join(_describe(a, depth + 1) for a in n.args)


def check_indices(tracer, sizes, captured):
    """Every captured tensor's index within [-n, n) of its axis, over all b, h, q_idx, kv_idx."""
    r = ranges(tracer, sizes, captured)
    for n in tracer.nodes:
        if n.op != "capture":
            continue
        t = captured[n.args[0]]
        for axis, i in enumerate(n.args[1:]):
            lo, hi = r[i.id]
            size = t.shape[axis]
            if not (lo >= -size and hi < size):
                raise IndexError("flex_attention: %s reads a captured tensor of shape %s at index %s on axis %d, "
                                 "which ranges over [%s, %s] for these sizes %s; it must stay in [%d, %d] "
                                 "(clamp it, or make the tensor larger)"
                                 % (tracer.name, tuple(t.shape), _describe(i), axis, lo, hi, sizes, -size, size - 1))
    return r
