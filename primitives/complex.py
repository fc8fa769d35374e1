"""Complex parts: real, imag, conj and complex(re, im), linear over the reals.

Transposes follow JAX's pairing `Re(ct * t)` (no conjugation), as every other rule here does; the
reverse-mode entry points (transforms/ad.py) convert to torch's convention, whose pairing is
`Re(conj(ct) * t)`: torch's cotangent is `conj(jax_vjp(conj(ct)))`, so that `grad` of a real
function of `z` is torch.func's (the conjugate Wirtinger derivative, times 2).
"""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero
from thunderx.avals import ShapedArray
from thunderx.core import declare
from thunderx.primitives import creation as C
from thunderx.primitives._elementwise import elementwise_batch, nary_abstract_eval

_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}
_COMPLEX_OF = {v: k for k, v in _REAL_OF.items()}


def _part_aval(name):
    def abstract_eval(x: ShapedArray) -> ShapedArray:
        if not x.dtype.is_complex:
            raise TypeError(f"{name} needs a complex operand, got {x.str_short()}")
        return ShapedArray(x.shape, _REAL_OF[x.dtype], x.device)

    return abstract_eval


def _complex_aval(re: ShapedArray, im: ShapedArray) -> ShapedArray:
    a = nary_abstract_eval("complex", re, im)
    if a.dtype not in _COMPLEX_OF:
        raise TypeError(f"complex needs float32 or float64 parts, got {a.str_short()}")
    return ShapedArray(a.shape, _COMPLEX_OF[a.dtype], a.device)


def _unary_linear(name, impl, abstract_eval, transpose, codegen, **props):
    # linear: core.declare's linear_jvp applies the primitive to the tangent
    prim = declare(
        name,
        impl=impl,
        abstract_eval=abstract_eval,
        linear=True,
        transpose=transpose,
        batch=lambda args, dims: elementwise_batch(prim, args, dims),
        torch_codegen=lambda args, avals: f"{codegen}({args[0]})",
        elementwise=True,
        **props,
    )
    return prim


# torch.real / torch.imag return views of the complex tensor's storage
real_p = _unary_linear(
    "real",
    torch.real,
    _part_aval("real"),
    lambda ct, x: [None if type(ct) is Zero else complex_(ct, C.zeros_like(ct))],
    "torch.real",
    aliases=(0,),
)
imag_p = _unary_linear(
    "imag",
    torch.imag,
    _part_aval("imag"),
    lambda ct, x: [None if type(ct) is Zero else complex_(C.zeros_like(ct), _neg(ct))],
    "torch.imag",
    aliases=(0,),
)
conj_p = _unary_linear(
    "conj",
    torch.conj_physical,
    lambda x: x.strip_weak(),
    lambda ct, x: [None if type(ct) is Zero else conj(ct)],
    "torch.conj_physical",
)


def _complex_transpose(ct, re, im):
    if type(ct) is Zero:
        return [None, None]
    return [real_p.bind(ct), _neg(imag_p.bind(ct))]


complex_p = declare(
    "complex",
    impl=torch.complex,
    abstract_eval=_complex_aval,
    linear=True,
    transpose=_complex_transpose,
    batch=lambda args, dims: elementwise_batch(complex_p, args, dims),
    torch_codegen=lambda args, avals: f"torch.complex({args[0]}, {args[1]})",
    elementwise=True,
)


def _neg(x):
    from thunderx.primitives import unary as U

    return U.neg(x)


def real(x):
    return real_p.bind(x)


def imag(x):
    return imag_p.bind(x)


def conj(x):
    return conj_p.bind(x)


def complex_(re, im):
    return complex_p.bind(re, im)
