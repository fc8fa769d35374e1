"""Research functions shared by the autodiff, vmap and jit tests."""

import torch
import torch.nn.functional as F


def mlp_params(din=6, dh=8, dout=3, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(din, dh, generator=g, dtype=dtype) * 0.5,
        torch.randn(dh, generator=g, dtype=dtype) * 0.1,
        torch.randn(dh, dout, generator=g, dtype=dtype) * 0.5,
        torch.randn(dout, generator=g, dtype=dtype) * 0.1,
    )


def mlp_loss(params, x, y):
    w1, b1, w2, b2 = params
    h = torch.tanh(x @ w1 + b1)
    return F.cross_entropy(h @ w2 + b2, y)


def ln_gelu_ce(params, x, y):
    w, gamma, beta = params
    h = F.gelu(F.layer_norm(x @ w, (w.shape[1],), gamma, beta))
    return F.cross_entropy(h, y)


def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    return (torch.softmax(scores, -1) @ v).sum()


def rnn_step(params, h, x):
    wh, wx, b = params
    return torch.tanh(h @ wh + x @ wx + b)


def data(n=5, din=6, classes=3, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, din, generator=g, dtype=dtype), torch.randint(
        0, classes, (n,), generator=g
    )


def research_case(name, dtype=torch.float64):
    """(scalar function, arguments) for one of the research functions."""
    x, y = data(dtype=dtype)
    g = torch.Generator().manual_seed(3)
    if name == "mlp":
        return mlp_loss, (mlp_params(dtype=dtype), x, y)
    if name == "ln_gelu_ce":
        p = (
            torch.randn(6, 3, generator=g, dtype=dtype),
            torch.ones(3, dtype=dtype),
            torch.zeros(3, dtype=dtype),
        )
        return ln_gelu_ce, (p, x, y)
    if name == "attention":
        return attention, tuple(torch.randn(2, 4, 8, generator=g, dtype=dtype) for _ in range(3))
    p = tuple(torch.randn(*s, generator=g, dtype=dtype) * 0.5 for s in [(4, 4), (6, 4), (4,)])
    return (lambda p, h, x: rnn_step(p, h, x).sum()), (p, torch.randn(5, 4, dtype=dtype), x)


RESEARCH = ["mlp", "ln_gelu_ce", "attention", "rnn"]
