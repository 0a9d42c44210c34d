#!/usr/bin/python3
"""Golden gradients from PyTorch autograd, run on the seeds' own PyTorch code.

The d2l.ai chapter "Attention Scoring Functions" (PyTorch version) defines masked_softmax and
DotProductAttention; they are reproduced below as the chapter writes them (d2l.sequence_mask
inlined). Everything runs in float64 with autograd; the inputs, the upstream gradient and the
gradients PyTorch computes are written to small JSON files that the C++ tests read, so `make test`
needs no torch. Regenerate with `make goldens` (Debian's python3-torch, run by /usr/bin/python3).

d2l.ai is licensed CC BY-SA 4.0 (text) and MIT-0 (code); see tests/data/goldens/README.md.
"""
import json
import math
import sys

import torch
from torch import nn


# ---- d2l.ai, chapter "Attention Scoring Functions", PyTorch code --------------------------------
def sequence_mask(X, valid_len, value=0):
    maxlen = X.size(1)
    mask = torch.arange((maxlen), dtype=torch.float32, device=X.device)[None, :] < valid_len[:, None]
    X[~mask] = value
    return X


def masked_softmax(X, valid_lens):
    """Perform softmax operation by masking elements on the last axis."""
    # X: 3D tensor, valid_lens: 1D or 2D tensor
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    else:
        shape = X.shape
        if valid_lens.dim() == 1:
            valid_lens = torch.repeat_interleave(valid_lens, shape[1])
        else:
            valid_lens = valid_lens.reshape(-1)
        # On the last axis, replace masked elements with a very large negative
        # value, whose exponentiation outputs 0
        X = sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
        return nn.functional.softmax(X.reshape(shape), dim=-1)


class DotProductAttention(nn.Module):
    """Scaled dot product attention."""

    def __init__(self, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    # Shape of queries: (batch_size, no. of queries, d)
    # Shape of keys: (batch_size, no. of key-value pairs, d)
    # Shape of values: (batch_size, no. of key-value pairs, value dimension)
    # Shape of valid_lens: (batch_size,) or (batch_size, no. of queries)
    def forward(self, queries, keys, values, valid_lens=None):
        d = queries.shape[-1]
        # Swap the last two dimensions of keys with keys.transpose(1, 2)
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)
# -------------------------------------------------------------------------------------------------


def tensor(t):
    return {"shape": list(t.shape), "data": [float(x) for x in t.detach().reshape(-1).tolist()]}


def ints(t):
    return {"shape": list(t.shape), "data": [int(x) for x in t.reshape(-1).tolist()]}


def masked_softmax_case(name, x, valid_lens, gen):
    x = x.clone().requires_grad_(True)
    y = masked_softmax(x.clone(), valid_lens)  # d2l masks a non-leaf (the scores) in place: so must we
    d_y = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    y.backward(d_y)
    return {"name": name, "X": tensor(x), "valid_lens": ints(valid_lens), "weights": tensor(y), "d_weights": tensor(d_y),
            "d_X": tensor(x.grad)}


def dot_product_case(name, q, k, v, valid_lens, gen):
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    attention = DotProductAttention(dropout=0.5)
    attention.eval()
    out = attention(q, k, v, valid_lens)
    d_out = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    out.backward(d_out)
    return {"name": name, "queries": tensor(q), "keys": tensor(k), "values": tensor(v), "valid_lens": ints(valid_lens),
            "output": tensor(out), "d_output": tensor(d_out), "d_queries": tensor(q.grad), "d_keys": tensor(k.grad),
            "d_values": tensor(v.grad)}


def main(out_dir):
    gen = torch.Generator().manual_seed(20261124)
    f64 = dict(dtype=torch.float64, generator=gen)
    cases = [
        # the chapter's example shapes: X (2, 2, 4), lengths [2, 3] and [[1, 3], [2, 4]]; a zero length too
        masked_softmax_case("d2l 1-D lens", torch.rand(2, 2, 4, **f64), torch.tensor([2, 3]), gen),
        masked_softmax_case("d2l 2-D lens", torch.rand(2, 2, 4, **f64), torch.tensor([[1, 3], [2, 4]]), gen),
        masked_softmax_case("zero lengths", torch.randn(2, 3, 5, **f64), torch.tensor([[0, 2, 5], [3, 0, 1]]), gen),
    ]
    with open(f"{out_dir}/d2l_masked_softmax.json", "w") as f:
        json.dump({"generator": "tools/goldens/make_grad_goldens.py", "torch": torch.__version__, "cases": cases}, f)
    cases = [
        # the chapter's example: queries (2, 1, 2), keys of ones (2, 10, 2), values 0..39, lengths [2, 6]
        dot_product_case("d2l example", torch.normal(0, 1, (2, 1, 2), **f64), torch.ones((2, 10, 2), dtype=torch.float64),
                         torch.arange(40, dtype=torch.float64).reshape(1, 10, 4).repeat(2, 1, 1), torch.tensor([2, 6]),
                         gen),
        dot_product_case("1-D lens with a zero", torch.randn(2, 3, 4, **f64), torch.randn(2, 7, 4, **f64),
                         torch.randn(2, 7, 5, **f64), torch.tensor([0, 5]), gen),
        dot_product_case("2-D lens with zeros", torch.randn(2, 3, 4, **f64), torch.randn(2, 7, 4, **f64),
                         torch.randn(2, 7, 5, **f64), torch.tensor([[1, 0, 7], [4, 2, 0]]), gen),
    ]
    with open(f"{out_dir}/d2l_dot_product_attention.json", "w") as f:
        json.dump({"generator": "tools/goldens/make_grad_goldens.py", "torch": torch.__version__, "cases": cases}, f)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/goldens")
