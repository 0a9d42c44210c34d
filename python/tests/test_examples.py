"""The Python examples that README.md and docs/python.md quote, run as tests."""


def test_autograd_example():
    # [snippet autograd]
    import torch, xattn

    q, k, v = (torch.randn(2, 8, 512, 64, requires_grad=True) for _ in range(3))
    sink = torch.zeros(8, requires_grad=True)  # one learnable logit per head
    lens = torch.tensor([512, 300])            # keys per batch row
    out = xattn.attention(q, k, v, causal=True, window=(256, 0), softcap=30.0, sinks=sink, lengths=lens)
    out.sum().backward()                       # q.grad, k.grad, v.grad, sink.grad
    # [end autograd]
    assert out.shape == (2, 8, 512, 64)
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
    assert sink.grad.shape == (8,) and torch.all(torch.isfinite(sink.grad)) and torch.any(sink.grad != 0)
    assert torch.all(k.grad[1, :, 300:] == 0)  # keys past the length get no gradient


def test_numpy_example(capsys):
    # [snippet numpy]
    import numpy as np, xattn

    # d2l's worked example: (B, S, D) arrays, one head; batch 0 sees 2 keys, batch 1 sees 6
    queries, keys = np.ones((2, 1, 2), np.float32), np.ones((2, 10, 2), np.float32)
    values = np.tile(np.arange(40, dtype=np.float32).reshape(1, 10, 4), (2, 1, 1))
    out = xattn.attention(queries, keys, values, lengths=[2, 6])
    print(out.ravel())  # [ 2.  3.  4.  5. 10. 11. 12. 13.]
    # [end numpy]
    assert capsys.readouterr().out == "[ 2.  3.  4.  5. 10. 11. 12. 13.]\n"
    assert out.shape == (2, 1, 4) and out.dtype == np.float32


def test_flex_demo_agrees_with_pytorch(capsys):
    """make demo's Python part runs and its fused result matches PyTorch's formula."""
    import os
    import runpy

    runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "examples", "flex_demo.py"))
    printed = capsys.readouterr().out
    assert "last query" in printed
    assert float(printed.rsplit(":", 1)[1]) < 1e-12
