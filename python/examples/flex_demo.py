"""make demo's Python part: a score and a mask written in Python (FlexAttention's API), fused on the
CPU, with the gradient of a learnable relative-position bias, checked against PyTorch's formula."""
import math

import torch

from xattn.flex import create_block_mask, flex_attention

torch.manual_seed(0)
B, H, S, D = 1, 2, 6, 4
q, k, v = (torch.randn(B, H, S, D, dtype=torch.float64, requires_grad=True) for _ in range(3))
bias = torch.linspace(-1, 1, H * (2 * S - 1), dtype=torch.float64).view(H, 2 * S - 1).requires_grad_()


def score_mod(score, b, h, q_idx, kv_idx):
    return score + bias[h, q_idx - kv_idx + S - 1]


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


block_mask = create_block_mask(causal, B=None, H=None, Q_LEN=S, KV_LEN=S, BLOCK_SIZE=2)
out = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
out.square().sum().backward()
torch.set_printoptions(precision=4)
print("flex_attention, causal + learnable relative bias, head 0, last query:", out[0, 0, -1].detach())
print("d loss / d bias, head 0:", bias.grad[0])

# the same formula in PyTorch ops on the whole score matrix
fused = [x.grad for x in (q, k, v, bias)]
for x in (q, k, v, bias):
    x.grad = None
i, j = torch.arange(S).view(-1, 1), torch.arange(S).view(1, -1)
s = q @ k.transpose(-1, -2) / math.sqrt(D) + bias[:, i - j + S - 1]
ref = torch.softmax(s.masked_fill(i < j, -math.inf), -1) @ v
ref.square().sum().backward()
err = max([(out - ref).abs().max().item()] + [(a - x.grad).abs().max().item() for a, x in zip(fused, (q, k, v, bias))])
print("largest difference from PyTorch's formula (output and gradients): %.1e" % err)
