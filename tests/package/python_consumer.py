"""The installed Python package (cmake --install): it loads from the prefix, runs d2l's example
on numpy arrays, and compiles a policy against the installed headers (a learnable-scale dot
product, which must equal the built-in attention with that scale)."""
import os
import sys

import numpy as np

import xattn

prefix = sys.argv[1]
assert os.path.realpath(xattn.__file__).startswith(os.path.realpath(prefix)), xattn.__file__
queries, keys = np.ones((2, 1, 2), np.float32), np.ones((2, 10, 2), np.float32)
values = np.tile(np.arange(40, dtype=np.float32).reshape(1, 10, 4), (2, 1, 1))
print(" ".join("%g" % x for x in xattn.attention(queries, keys, values, lengths=[2, 6]).ravel()))

scaled = xattn.policy("""
struct scaled_dot_t {
  xattn::learnable<> scale = 0.25;
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += q[d] * k[d];
    return T(scale) * s;
  }
};""", name="scaled_dot_t")
rng = np.random.default_rng(1)
q, k, v = (rng.standard_normal((1, 2, 7, 16)).astype(np.float32) for _ in range(3))
ours = xattn.attention(q, k, v, score=scaled, causal=True)
want = xattn.attention(q, k, v, scale=0.25, causal=True)
assert np.abs(ours - want).max() < 1e-5, np.abs(ours - want).max()
print("installed package ok")
