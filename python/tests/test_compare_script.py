"""bench/compare.py (run by make bench) calls the package's private functions to time the C call
alone: its two calls must still compute the same step, or the overhead it reports means nothing."""
import importlib.util
import pathlib

import torch

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "compare.py"


def test_the_c_call_alone_computes_what_attention_does():
    spec = importlib.util.spec_from_file_location("xattn_bench_compare", SCRIPT)
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    with torch.no_grad():
        c_call, py_call, out = compare.decode_calls((2, 4, 3, 70, 32))
        out.fill_(float("nan"))
        c_call()
        want = py_call()
    assert out.shape == want.shape == (2, 4, 3, 32)
    assert torch.equal(out, want)
