"""xattn.policy: a scoring function written in C++ (the DSL's policy struct), compiled on first
use with the system's C++ compiler against xattn's headers, cached by the hash of everything
that goes into it, and loaded with ctypes."""

import ctypes
import glob
import hashlib
import os
import re
import shlex
import subprocess
import tempfile

from . import _c
from . import _config
from ._config import CXX, CXX_FLAGS, INCLUDE_DIRS

KERNELS = getattr(_config, "KERNELS", None)

_FLOAT_LEARNABLE = re.compile(r"\blearnable\s*<\s*float\s*>")
_LEARNABLE = re.compile(r"\blearnable\s*(?:<[^<>]*>)?\s+([A-Za-z_]\w*)\s*(?:[{=;])")

_GLUE = """
namespace xattn_jit {
struct policy : ::%(name)s {
%(parameters)s};
using T = %(element)s;
}  // namespace xattn_jit

extern "C" {
XATTN_API size_t xattn_policy_parameter_count(void) {
  return xattn::c_api::policy::parameter_count<xattn_jit::policy>();
}
XATTN_API void xattn_policy_parameter_defaults(double* values) {
  size_t n = 0;
  xattn::c_api::policy::for_each_learnable(xattn_jit::policy{}, [&](const auto& x) { values[n++] = double(x.value); });
}
XATTN_API xattn_status xattn_policy_forward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                                            const xattn_attention_desc* desc, xattn_tensor* out, xattn_tensor* lse,
                                            const double* values) {
  return xattn::c_api::policy::forward<xattn_jit::policy, xattn_jit::T>(q, k, v, desc, out, lse, values);
}
XATTN_API xattn_status xattn_policy_backward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                                             const xattn_attention_desc* desc, const xattn_tensor* out,
                                             const xattn_tensor* lse, const xattn_tensor* d_out, xattn_tensor* dq,
                                             xattn_tensor* dk, xattn_tensor* dv, xattn_tensor* dsinks,
                                             const double* values, double* d_values) {
  return xattn::c_api::policy::backward<xattn_jit::policy, xattn_jit::T>(q, k, v, desc, out, lse, d_out, dq, dk, dv,
                                                                          dsinks, values, d_values);
}
XATTN_API const char* xattn_policy_last_error(void) { return xattn::c_api::last_error().c_str(); }
}
"""


_interface_digest = None


def interface_digest(include_dirs):
    """A hash of the headers a compiled library is built from (xattn.h, xattn/**): a cached library
    built against other ones is compiled again, even within one version."""
    global _interface_digest
    if _interface_digest is None:
        h = hashlib.sha256()
        for d in include_dirs:
            paths = glob.glob(os.path.join(d, "xattn.h")) + glob.glob(os.path.join(d, "xattn", "**", "*"),
                                                                      recursive=True)
            for path in sorted(p for p in paths if os.path.isfile(p)):
                h.update(os.path.relpath(path, d).encode())
                with open(path, "rb") as f:
                    h.update(f.read())
        _interface_digest = h.hexdigest()
    return _interface_digest


class CompileError(RuntimeError):
    """The C++ compiler refused a policy; the message starts with its first error line."""


def cache_dir():
    return os.environ.get("XATTN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "xattn")


def compile_shared(src, who, flags=()):
    """The path of the shared library compiled from the C++ source src, cached by the hash of the
    source, the compiler's command, the library's version and its C interface; who names the
    caller in a compile error; flags go after the package's own (a later -O wins), and
    $XATTN_JIT_FLAGS (e.g. "-O1" for quicker compiles, "-g") after those."""
    here = os.path.dirname(os.path.abspath(__file__))
    extra = shlex.split(os.environ.get("XATTN_JIT_FLAGS", ""))
    command = [CXX, *CXX_FLAGS, *flags, *extra,
               *("-I" + os.path.join(here, d) for d in INCLUDE_DIRS)]  # relative: to the package
    kernels = os.path.join(here, KERNELS) if KERNELS else None
    linked = []
    if kernels and os.path.exists(kernels):  # the tile products precompiled: about a third less compile time
        command.append("-DXATTN_PRECOMPILED_KERNELS")
        linked = [kernels]
    dirs = [os.path.join(here, d) for d in INCLUDE_DIRS]
    parts = [src, *command, _c.lib.xattn_version().decode(), interface_digest(dirs)]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]
    directory = cache_dir()
    path = os.path.join(directory, "jit_%s.so" % key)
    if not os.path.exists(path):
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            cpp, so = os.path.join(tmp, "source.cpp"), os.path.join(tmp, "library.so")
            with open(cpp, "w") as f:
                f.write(src)
            run = subprocess.run(command + [cpp, *linked, "-o", so], capture_output=True, text=True)
            if run.returncode != 0:
                errors = [l for l in run.stderr.splitlines() if "error" in l]
                first = errors[0] if errors else (run.stderr.strip().splitlines() or ["(no output)"])[0]
                raise CompileError("%s does not compile: %s\n\n%s" % (who, first, run.stderr))
            os.replace(so, path)  # atomic: a concurrent compile of the same key writes the same file
    return path


class Policy:
    """A compiled scoring policy: xattn.attention(q, k, v, score=policy). Its learnables are
    attributes (torch tensors that require grad when torch is present, else floats), named as in
    the source, in declaration order (parameters() is written for you when the struct has none)."""

    def __init__(self, source, name):
        if not re.fullmatch(r"[A-Za-z_][\w:]*", name):
            raise ValueError("xattn.policy: name %r is not a C++ type name" % (name,))
        self.source, self.name = source, name
        self.names = _LEARNABLE.findall(source)
        self._libs = {}
        defaults = self._defaults()
        try:
            import torch

            for n, x in zip(self.names, defaults):
                setattr(self, n, torch.tensor(x, dtype=torch.float64, requires_grad=True))
        except ImportError:
            for n, x in zip(self.names, defaults):
                setattr(self, n, x)

    def parameters(self):
        """The learnables, in order."""
        return [getattr(self, n) for n in self.names]

    def values(self):
        return (ctypes.c_double * max(1, len(self.names)))(*[float(p) for p in self.parameters()])

    def _defaults(self):
        lib = self.library(_c.F32)  # what most calls take; float64 compiles when first used
        n = lib.xattn_policy_parameter_count()
        if n != len(self.names):
            raise ValueError("xattn.policy: %s lists %d learnables in parameters() but the source declares %d "
                             "(%s); list them in declaration order" % (self.name, n, len(self.names),
                                                                        ", ".join(self.names)))
        out = (ctypes.c_double * max(1, n))()
        lib.xattn_policy_parameter_defaults(out)
        return list(out)[:n]

    def _source(self, element):
        if re.search(r"\bparameters\s*\(\s*\)", self.source):
            params = ""
        elif self.names:
            params = "  auto parameters() const { return std::tie(%s); }\n" % ", ".join(
                "::%s::%s" % (self.name, n) for n in self.names)
        else:
            params = ""
        # a learnable is the float64 tensor's value: held in double whatever type the source declares,
        # so that the float64 library evaluates it where finite differences put it
        source = _FLOAT_LEARNABLE.sub("learnable<double>", self.source)
        return ("#include <xattn/c_api/policy.hpp>\n\n#include <cstddef>\n#include <span>\n#include <tuple>\n\n"
                + "#line 1 \"%s\"\n" % self.name + source + "\n"
                + _GLUE % {"name": self.name, "parameters": params, "element": "double" if element == _c.F64
                           else "float"})

    def library(self, element):
        """The compiled library for inputs of element type F32 or F64, compiled on first use."""
        if element not in (_c.F32, _c.F64):
            raise NotImplementedError("xattn.policy: compiled policies take float32 or float64 inputs")
        if element in self._libs:
            return self._libs[element]
        path = compile_shared(self._source(element), "xattn.policy: %s" % self.name)
        lib = ctypes.CDLL(path)
        T = ctypes.POINTER(_c.Tensor)
        D = ctypes.POINTER(ctypes.c_double)
        lib.xattn_policy_parameter_count.restype = ctypes.c_size_t
        lib.xattn_policy_parameter_defaults.argtypes = [D]
        lib.xattn_policy_forward.restype = ctypes.c_int
        lib.xattn_policy_forward.argtypes = [T, T, T, ctypes.POINTER(_c.Desc), T, T, D]
        lib.xattn_policy_backward.restype = ctypes.c_int
        lib.xattn_policy_backward.argtypes = [T, T, T, ctypes.POINTER(_c.Desc), T, T, T, T, T, T, T, D, D]
        lib.xattn_policy_last_error.restype = ctypes.c_char_p
        self._libs[element] = lib
        return lib

    def check(self, lib, status):
        if status != _c.OK:
            _c.raise_for(status, lib.xattn_policy_last_error().decode())


def policy(source, name):
    """Compile (or load from the cache) the C++ scoring policy `name` defined in `source`."""
    return Policy(source, name)
