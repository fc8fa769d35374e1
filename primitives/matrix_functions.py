"""The matrix exponential and its Frechet derivative.

`expm(A)` is torch.matrix_exp; its jvp is `expm_frechet(A, dA)`, the top-right block of
exp([[A, dA], [0, A]]) (the block-matrix trick torch's backward uses too). `expm_frechet` is linear
in its second operand; its transpose is `expm_frechet(A^T, ct)` because <L(A, E), G> equals
<E, L(A^T, G)>; its own jvp is the same trick one level up, so every order differentiates.

    >>> from thunderx.primitives import matrix_functions as MF
    >>> MF.expm(torch.zeros(2, 2))  # the identity
"""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero, instantiate, is_undefined
from thunderx.core import (
    abstract_eval_rules,
    batch_rules,
    get_aval,
    impl_rules,
    jvp_rules,
    linear_primitives,
    new_primitive,
    torch_codegen_rules,
    transpose_rules,
)
from thunderx.primitives import _matrix as M
from thunderx.primitives import slicing as SL
from thunderx.primitives.linalg_decomp import _batch_front, _matrix_aval

expm_p = new_primitive("expm")
expm_frechet_p = new_primitive("expm_frechet")


def expm(x):
    """exp of each (*batch, n, n) matrix."""
    return expm_p.bind(x)


def expm_frechet(a, e):
    """The Frechet derivative of exp at `a` in the direction `e`, linear in `e`."""
    return expm_frechet_p.bind(a, e)


def _expm_abstract_eval(x):
    _matrix_aval("expm", x, square=True)
    return x.strip_weak()


def _frechet_abstract_eval(a, e):
    _matrix_aval("expm_frechet", a, square=True)
    if a.shape != e.shape or a.dtype != e.dtype:
        raise TypeError(f"expm_frechet: {a.str_short()} and {e.str_short()} differ")
    return a.strip_weak()


def _frechet_impl(a, e):
    n = a.shape[-1]
    top = torch.cat([a, e], -1)
    bottom = torch.cat([torch.zeros_like(a), a], -1)
    return torch.matrix_exp(torch.cat([top, bottom], -2))[..., :n, n:]


def _block(a, e):
    """[[a, e], [0, a]] from primitives."""
    nd = len(M.shape(a))
    n = M.shape(a)[-1]
    keep = [(0, 0, 0)] * (nd - 1)
    bottom = SL.pad(a, 0.0, keep + [(n, 0, 0)])
    return SL.concatenate([SL.concatenate([a, e], nd - 1), bottom], nd - 2)


def _top_right(x, n):
    nd = len(M.shape(x))
    return SL.slice_in_dim(SL.slice_in_dim(x, 0, n, 1, nd - 2), n, 2 * n, 1, nd - 1)


def _expm_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return expm(x), expm_frechet(x, t)


def _frechet_jvp(primals, tangents):
    a, e = primals
    ta, te = tangents
    out = expm_frechet(a, e)
    if type(ta) is Zero and type(te) is Zero:
        return out, Zero(get_aval(out))
    if type(ta) is Zero:
        return out, expm_frechet(a, te)
    n = M.shape(a)[-1]
    d = expm_frechet(_block(a, e), _block(ta, instantiate(te)))
    return out, _top_right(d, n)


def _frechet_transpose(ct, a, e):
    if is_undefined(a):
        raise TypeError("expm_frechet is linear in its second operand only")
    return [None, expm_frechet(M.mT(a), instantiate(ct))]


def _frechet_batch(args, dims):
    a, e = M.batch_to_front(list(args), list(dims))
    return expm_frechet(a, e), 0


# torch.matrix_exp fails on some non-contiguous batches of 1 x 1 matrices (it views its input)
impl_rules[expm_p] = lambda x: torch.matrix_exp(x.contiguous())
abstract_eval_rules[expm_p] = _expm_abstract_eval
torch_codegen_rules[expm_p] = lambda args, avals: f"torch.matrix_exp({args[0]}.contiguous())"
jvp_rules[expm_p] = _expm_jvp
batch_rules[expm_p] = _batch_front(expm_p)

impl_rules[expm_frechet_p] = _frechet_impl
abstract_eval_rules[expm_frechet_p] = _frechet_abstract_eval
jvp_rules[expm_frechet_p] = _frechet_jvp
transpose_rules[expm_frechet_p] = _frechet_transpose
batch_rules[expm_frechet_p] = _frechet_batch
linear_primitives.add(expm_frechet_p)  # in e
