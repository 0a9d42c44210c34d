#!/usr/bin/python3
"""usage: bench/torch_d2l.py OUT_JSON

PyTorch 1.13 (Debian's python3-torch) running d2l's DotProductAttention recipe -- scores by bmm,
masked_softmax, bmm with the values -- forward and autograd backward, on the backward shapes of
bench/backward.cpp, with 1 and 2 threads. Written as Google-Benchmark-like JSON rows
"torch_d2l_fwd_bwd/<B>/<H>/<Sq>/<Skv>/<D>/<causal>/<threads>" with the same "gflops" count as
xattn_fwd_bwd (3.5 x 4·B·H·Sq·Skv·D, causal half), for report.py to merge. Also d2l's
AdditiveAttention forward + backward on bench/additive.cpp's shape, as
"additive/torch_d2l_fwd_bwd/<B>/<Sq>/<Skv>/<d>/<h>/<threads>" with counter "ms". And the scores of
bench/user_policies.cpp written in PyTorch the usual way (normalise and bmm, cdist, a projection
and bmm, weights and bmm, a gathered bias table), materialised, with autograd to the inputs and the
learnables, as "user_policy/<form>/<policy>/<B>/<H>/<Sq>/<Skv>/<D>/<threads>" with counter "ms",
form torch_fwd (the forward, recording the graph) and torch_fwd_bwd (forward and backward).
Skipped without torch.
"""
import json
import math
import sys
import time

try:
    import torch
except ImportError:
    print("torch_d2l.py: no torch (apt-get install python3-torch); skipped", file=sys.stderr)
    sys.exit(0)

SHAPES = [(1, 8, 2048, 2048, 64, 0), (1, 8, 2048, 2048, 128, 0), (1, 8, 4096, 4096, 64, 0), (1, 8, 2048, 2048, 64, 1)]


def d2l_attention(q, k, v, causal):
    # d2l's DotProductAttention.forward with (batch x heads) folded into bmm's batch, as d2l's
    # MultiHeadAttention does; causal as a -1e6 fill of the upper triangle (d2l's masked fill).
    scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    if causal:
        n = scores.shape[-1]
        upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(upper, -1e6)
    return torch.bmm(torch.softmax(scores, dim=-1), v)


class AdditiveAttention(torch.nn.Module):
    """d2l.ai's AdditiveAttention (PyTorch version, chapter "Attention Scoring Functions"; MIT-0)."""

    def __init__(self, num_hiddens, dropout):
        super().__init__()
        self.W_k = torch.nn.LazyLinear(num_hiddens, bias=False)
        self.W_q = torch.nn.LazyLinear(num_hiddens, bias=False)
        self.w_v = torch.nn.LazyLinear(1, bias=False)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens):
        queries, keys = self.W_q(queries), self.W_k(keys)
        features = torch.tanh(queries.unsqueeze(2) + keys.unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)
        # d2l's masked_softmax with 1-D lengths: -1e6 beyond each length
        mask = torch.arange(scores.shape[-1])[None, None, :] >= valid_lens[:, None, None]
        return torch.bmm(self.dropout(torch.softmax(scores.masked_fill(mask, -1e6), dim=-1)), values)


def additive_rows():
    b, sq, skv, d, h = 2, 256, 256, 64, 64  # bench/additive.cpp's case
    rows = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        g = torch.Generator().manual_seed(3)
        q, k, v = (torch.rand(b, n, d, generator=g) * 2 - 1 for n in (sq, skv, skv))
        for t in (q, k, v):
            t.requires_grad_(True)
        lens = torch.tensor([skv, skv // 2])
        model = AdditiveAttention(h, 0.0)
        model(q, k, v, lens)  # materialise the lazy layers
        d_out = torch.ones(b, sq, d)
        best = math.inf
        for rep in range(6):
            start = time.perf_counter()
            model(q, k, v, lens).backward(d_out)
            best = min(best, time.perf_counter() - start) if rep > 0 else best
        rows.append({"name": f"additive/torch_d2l_fwd_bwd/{b}/{sq}/{skv}/{d}/{h}/{threads}", "run_type": "iteration",
                     "real_time": best * 1e3, "time_unit": "ms", "ms": best * 1e3})
        print(rows[-1]["name"], f"{best * 1e3:.1f} ms", file=sys.stderr)
    return rows


def user_policy_scores(policy, q, k, param, heads):
    """bench/user_policies.cpp's scores for (batch x heads, S, D) q and k; param is the learnable."""
    if policy == "scaled_dot":
        return torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    if policy == "cosine_temperature":
        qn = torch.nn.functional.normalize(q, dim=-1)
        kn = torch.nn.functional.normalize(k, dim=-1)
        return torch.bmm(qn, kn.transpose(1, 2)) / param
    if policy == "gaussian":
        return -torch.cdist(q, k).pow(2) / (2 * param * param)
    if policy == "bilinear":
        return torch.bmm(q @ param, k.transpose(1, 2))
    if policy == "laplace":
        return -torch.cdist(q, k, p=1) / param
    if policy == "weighted_dot":
        return torch.bmm(q * param, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    # relative_bias: table (heads, 2R + 1) gathered at clamp(j - i, -R, R) + R, causal by -inf
    n, r = q.shape[1], (param.shape[1] - 1) // 2
    pos = torch.arange(n)
    bucket = (pos[None, :] - pos[:, None]).clamp(-r, r) + r
    scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    scores = (scores.view(-1, heads, n, n) + param[:, bucket]).view(-1, n, n)
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    return scores.masked_fill(upper, -math.inf)


def user_policy_param(policy, h, d):
    """The learnable of each policy, as bench/user_policies.cpp sets it."""
    if policy == "relative_bias":
        return (0.1 * torch.sin(torch.arange(h * 33, dtype=torch.float32))).view(h, 33)
    if policy == "weighted_dot":
        return 1.0 + 0.5 * torch.sin(torch.arange(d, dtype=torch.float32))
    if policy == "bilinear":
        n = torch.arange(d * d, dtype=torch.float32)
        return (torch.eye(d).flatten() * 0.125 + torch.sin(n) / 64).view(d, d)
    return torch.tensor({"cosine_temperature": 0.1, "gaussian": 4.0, "laplace": 8.0}.get(policy, 1.0))


USER_SHAPES = [(1, 4, 256, 64), (1, 8, 2048, 64)]  # bench/user_policies.cpp's cases
USER_POLICIES = ("scaled_dot", "cosine_temperature", "gaussian", "bilinear", "weighted_dot", "laplace",
                 "relative_bias")


def user_policy_rows():
    rows = []
    for (b, h, s, d) in USER_SHAPES:
        reps = 6 if s <= 256 else 3
        for policy in USER_POLICIES:
            for threads in (1, 2):
                torch.set_num_threads(threads)
                g = torch.Generator().manual_seed(5)
                q, k, v, d_out = (torch.rand(b * h, s, d, generator=g) * 2 - 1 for _ in range(4))
                for t in (q, k, v):
                    t.requires_grad_(True)
                param = user_policy_param(policy, h, d)
                param.requires_grad_(policy != "scaled_dot")
                fwd = fwd_bwd = math.inf
                for rep in range(reps + 1):  # the first is a warm-up
                    start = time.perf_counter()
                    out = torch.bmm(torch.softmax(user_policy_scores(policy, q, k, param, h), dim=-1), v)
                    mid = time.perf_counter()
                    out.backward(d_out)
                    end = time.perf_counter()
                    if rep > 0:
                        fwd, fwd_bwd = min(fwd, mid - start), min(fwd_bwd, end - start)
                for form, best in (("torch_fwd", fwd), ("torch_fwd_bwd", fwd_bwd)):
                    rows.append({"name": f"user_policy/{form}/{policy}/{b}/{h}/{s}/{s}/{d}/{threads}",
                                 "run_type": "iteration", "real_time": best * 1e3, "time_unit": "ms",
                                 "ms": best * 1e3})
                    print(rows[-1]["name"], f"{best * 1e3:.2f} ms", file=sys.stderr)
    return rows


def main(out_path):
    rows = additive_rows() + user_policy_rows()
    for (b, h, sq, skv, d, causal) in SHAPES:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            g = torch.Generator().manual_seed(1)
            q, k, v = (torch.rand(b * h, n, d, generator=g) * 2 - 1 for n in (sq, skv, skv))
            for t in (q, k, v):
                t.requires_grad_(True)
            d_out = torch.rand(b * h, sq, d, generator=g) * 2 - 1
            best = math.inf
            for rep in range(4):
                start = time.perf_counter()
                out = d2l_attention(q, k, v, causal)
                out.backward(d_out)
                best = min(best, time.perf_counter() - start) if rep > 0 else best
            flop = 3.5 * 4.0 * b * h * sq * skv * d / (2 if causal else 1)
            rows.append({"name": f"torch_d2l_fwd_bwd/{b}/{h}/{sq}/{skv}/{d}/{causal}/{threads}",
                         "run_type": "iteration", "real_time": best * 1e3, "time_unit": "ms", "gflops": flop / best / 1e9})
            print(rows[-1]["name"], f"{best * 1e3:.1f} ms", f"{rows[-1]['gflops']:.1f} gflops", file=sys.stderr)
    with open(out_path, "w") as f:
        json.dump({"benchmarks": rows}, f)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "torch_d2l.json")
