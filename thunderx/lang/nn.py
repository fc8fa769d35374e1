"""torch.nn.functional: activations, normalization, losses, attention, embedding, pooling."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.avals import is_float
from thunderx.errors import unsupported
from thunderx.lang._base import (
    canon_dim,
    canon_dims,
    convert,
    dtype,
    float_operand,
    is_tensor,
    ndim,
    promote,
    register,
    shape,
)
from thunderx.lang.reductions import vector_norm
from thunderx.primitives import binary as B
from thunderx.primitives import composite as K
from thunderx.primitives import composite_activation as KA
from thunderx.primitives import composite_norm as KN
from thunderx.primitives import composite_softmax as KS
from thunderx.primitives import creation as C
from thunderx.primitives import indexing as I
from thunderx.primitives import reductions as R
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U
from thunderx.primitives.composite_norm_affine import layer_norm_affine

# ------------------------------------------------------------------------------ activations


@register(F.relu, torch.relu, methods=("relu",))
def relu(x, inplace=False):
    if is_float(dtype(x)):
        # torch's kernel, with threshold_backward as its derivative (primitives/composite.py)
        return K.relu(x)
    if dtype(x) == torch.bool:
        raise TypeError("relu: bool tensors are not supported (torch refuses them too)")
    return U.select(B.le(x, 0), 0, x)


@register(F.relu6)
def _relu6(x, inplace=False):
    return hardtanh(x, 0.0, 6.0)


@register(F.hardtanh)
def hardtanh(x, min_val=-1.0, max_val=1.0, inplace=False):
    # The value is clamp's; the derivative is 1 only strictly inside (min_val, max_val) (torch's
    # hardtanh_backward), where clamp's counts the bounds in. nan stays nan.
    if not is_float(dtype(x)):
        from thunderx.lang.elementwise import _clamp

        return _clamp(x, min_val, max_val)
    from thunderx.primitives.higher_order import stop_gradient

    # at a bound the value is x itself, as clamp's max(x, min) keeps x: -0.0 stays -0.0 at a
    # bound of 0 (relu6(-0.0) is -0.0 in torch), with the derivative 0 there
    at_bound = B.or_p.bind(B.eq(x, min_val), B.eq(x, max_val))
    inside = U.select(at_bound, stop_gradient(x), x)
    return U.select(B.lt(x, min_val), min_val, U.select(B.gt(x, max_val), max_val, inside))


@register(F.gelu)
def gelu(x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"F.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if not is_float(dtype(x)):
        raise TypeError(f"F.gelu: input must be floating (as in torch), got {dtype(x)}")
    return K.gelu(x, approximate)


@register(F.silu)
def silu(x, inplace=False):
    if not is_float(dtype(x)):
        raise TypeError(f"F.silu: input must be floating (as in torch), got {dtype(x)}")
    return KA.silu(x)


@register(F.elu)
def elu(x, alpha=1.0, inplace=False):
    return _exp_kink(x, alpha, 1.0)


def _exp_kink(x, alpha, scale_in, scale_out=1.0):
    """torch's elu kernel and elu_backward (primitives/composite_activation.py): at the kink
    the negative side's slope and a zero second derivative; a nan takes the positive side's
    slope (torch's scalar loop's; its vectorized kernel gives nan)."""
    if not is_float(dtype(x)):
        raise TypeError(f"elu: input must be floating (as in torch), got {dtype(x)}")
    return KA.elu(x, alpha, scale_out, scale_in)


@register(F.selu, torch.selu)
def _selu(x, inplace=False):
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    return _exp_kink(x, alpha, 1.0, scale)


@register(F.celu, torch.celu)
def _celu(x, alpha=1.0, inplace=False):
    return _exp_kink(x, alpha, 1.0 / alpha)


@register(F.leaky_relu)
def leaky_relu(x, negative_slope=0.01, inplace=False):
    return U.select(B.gt(x, 0.0), x, B.mul(x, negative_slope))


@register(F.prelu, torch.prelu)
def _prelu(x, weight):
    w = weight
    if ndim(weight) == 1 and shape(weight)[0] > 1:
        w = S.broadcast_in_dim(weight, shape(x), (1,))
    elif ndim(weight) == 1:
        w = S.reshape(weight, ())  # one slope for every element: the result has x's shape
    (x2, w2), _ = promote(x, w)
    return U.select(B.gt(x2, 0.0), x2, B.mul(x2, w2))


@register(F.softplus)
def softplus(x, beta=1.0, threshold=20.0):
    if not is_float(dtype(x)):
        raise TypeError(f"F.softplus: input must be floating (as in torch), got {dtype(x)}")
    return KA.softplus_kernel(x, beta, threshold)


@register(F.mish)
def mish(x, inplace=False):
    if not is_float(dtype(x)):
        raise TypeError(f"F.mish: input must be floating (as in torch), got {dtype(x)}")
    return KA.mish(x)


@register(F.logsigmoid)
def logsigmoid(x):
    """torch's kernel, min(x, 0) - log1p(exp(-|x|)), and its log_sigmoid_backward as the
    derivative, sigmoid(-x) by pieces of exp(-|x|) (primitives/composite_activation.py)."""
    if not is_float(dtype(x)):
        raise TypeError(f"F.logsigmoid: input must be floating (as in torch), got {dtype(x)}")
    return KA.log_sigmoid(x)


@register(F.hardsigmoid)
def _hardsigmoid(x, inplace=False):
    # (x + 3) / 6 strictly inside (-3, 3), the constants 0 and 1 outside, and nan as a constant:
    # torch's hardsigmoid_backward passes the derivative only strictly inside, so at a nan input
    # it is 0 (hardtanh's passes nan on)
    from thunderx.primitives.higher_order import stop_gradient

    if not is_float(dtype(x)):
        return B.div(hardtanh(B.add(x, 3.0), 0.0, 6.0), 6.0)
    inside = B.and_p.bind(B.gt(x, -3.0), B.lt(x, 3.0))
    edge = U.select(B.ge(x, 3.0), 1.0, U.select(B.le(x, -3.0), 0.0, stop_gradient(x)))
    return U.select(inside, B.div(B.add(x, 3.0), 6.0), edge)


@register(F.hardswish)
def _hardswish(x, inplace=False):
    if not is_float(dtype(x)):
        return B.mul(x, _hardsigmoid(x))
    return KA.hardswish(x)


@register(F.softsign)
def _softsign(x):
    return B.div(x, B.add(U.abs(x), 1.0))


@register(F.tanhshrink)
def _tanhshrink(x):
    return B.sub(x, U.tanh(x))


@register(F.threshold, torch.threshold)
def _threshold(x, threshold, value, inplace=False):
    if is_float(dtype(x)):
        return K.threshold(x, threshold, value)
    return U.select(B.le(x, threshold), value, x)


@register(F.glu)
def _glu(x, dim=-1):
    a, b = _halves(x, dim)
    return B.mul(a, U.logistic(b))


def _halves(x, dim):
    d = canon_dim(dim, ndim(x))
    n = shape(x)[d] // 2
    return S.slice_in_dim(x, 0, n, 1, d), S.slice_in_dim(x, n, 2 * n, 1, d)


def _softmax_dtype(x, dt):
    if dt is not None:
        return convert(x, dt)
    return float_operand(x)


@register(F.softmax, torch.softmax, torch.special.softmax, methods=("softmax",))
def softmax(x, dim=None, _stacklevel=3, dtype=None):

    x = _softmax_dtype(x, dtype)
    d = canon_dim(-1 if dim is None else dim, ndim(x))
    if ndim(x) == 0:  # over one element, as torch: nan (and a nan derivative) at nan or inf
        return S.reshape(KS.softmax(S.reshape(x, (1,)), 0), ())
    if 0 in shape(x):
        return x
    return KS.softmax(x, d)


@register(F.log_softmax, torch.log_softmax, torch.special.log_softmax, methods=("log_softmax",))
def log_softmax(x, dim=None, _stacklevel=3, dtype=None):
    x = _softmax_dtype(x, dtype)
    d = canon_dim(-1 if dim is None else dim, ndim(x))
    if ndim(x) == 0:  # over one element, as torch: nan (and a nan derivative) at nan or inf
        return S.reshape(KS.log_softmax(S.reshape(x, (1,)), 0), ())
    if 0 in shape(x):
        return x
    return KS.log_softmax(x, d)


@register(F.softmin)
def _softmin(x, dim=None, _stacklevel=3, dtype=None):
    return softmax(U.neg(x), dim, dtype=dtype)


# ---------------------------------------------------------------------------- normalization


def _norm_dims(x, normalized_shape):
    k = len(tuple(normalized_shape))
    return tuple(range(ndim(x) - k, ndim(x)))


@register(F.layer_norm)
def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = _norm_dims(x, normalized_shape)
    if tuple(shape(x)[d] for d in dims) != tuple(normalized_shape):
        raise ValueError(
            f"layer_norm: normalized_shape {tuple(normalized_shape)} does not match the input's "
            f"trailing dims {shape(x)}"
        )
    if dims and 0 not in shape(x) and is_float(dtype(x)):
        if _kernel_affine(x, weight, bias, dims):
            # the weight and bias inside torch's kernel, its backward as the transpose
            # (composite_norm_affine.py)
            return layer_norm_affine(x, weight, bias, len(dims), eps)
        # torch's kernel, with native_layer_norm_backward as its derivative (composite_norm.py)
        return _affine(KN.layer_norm(x, len(dims), eps), weight, bias)
    n = float(math.prod(shape(x)[d] for d in dims))
    mean = B.div(R.reduce_sum(x, dims, keepdims=True), n)
    xc = B.sub(x, S.broadcast_to(mean, shape(x)))
    var = B.div(R.reduce_sum(B.mul(xc, xc), dims, keepdims=True), n)
    out = B.mul(xc, S.broadcast_to(U.rsqrt(B.add(var, eps)), shape(x)))
    return _affine(out, weight, bias)


def _kernel_affine(x, weight, bias, dims) -> bool:
    """Whether torch's kernel takes this weight and bias as they are: a weight, and both (the
    bias may be absent) tensors of x's dtype and normalized shape."""
    want = tuple(shape(x)[d] for d in dims)
    return weight is not None and all(
        p is None or (is_tensor(p) and tuple(shape(p)) == want and dtype(p) == dtype(x))
        for p in (weight, bias)
    )


def _affine(out, weight, bias):
    if weight is not None:
        (out, w), _ = promote(out, weight)
        out = B.mul(out, w)
    if bias is not None:
        (out, b), _ = promote(out, bias)
        out = B.add(out, b)
    return out


@register(F.rms_norm)
def rms_norm(x, normalized_shape, weight=None, eps=None):
    """torch's own composition (layer_norm.cpp, rms_norm_symint): in float32 for float16 and
    bfloat16 inputs (eps defaults to the computing type's epsilon), `rsqrt(pow(x, 2).mean(dims,
    keepdim) + eps)`, times x, times the weight, then in x's dtype. `pow(x, 2)`, not `x * x`:
    its derivative is one term, `g * (2 * x)`, as torch's, where x * x adds two."""
    dims = _norm_dims(x, normalized_shape)
    if tuple(shape(x)[d] for d in dims) != tuple(normalized_shape):
        raise ValueError(
            f"rms_norm: normalized_shape {tuple(normalized_shape)} does not match the input's "
            f"trailing dims {shape(x)}"
        )
    dt = dtype(x)
    opmath = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt
    up = convert(x, opmath) if opmath != dt else x
    if eps is None:
        eps = torch.finfo(opmath).eps
    n = float(math.prod(shape(x)[d] for d in dims))
    ms = B.div(R.reduce_sum(B.pow(up, 2), dims, keepdims=True), n)
    out = _affine(B.mul(up, S.broadcast_to(U.rsqrt(B.add(ms, eps)), shape(x))), weight, None)
    return convert(out, dt) if dtype(out) != dt else out


@register(F.normalize)
def normalize(x, p=2.0, dim=1, eps=1e-12, out=None):
    norm = vector_norm(x, p, dim, keepdim=True)
    denom = B.maximum(norm, eps)
    if dtype(x).is_complex:  # the norm is real
        denom = convert(denom, dtype(x))
    return B.div(x, S.broadcast_to(denom, shape(x)))


@register(F.cosine_similarity, torch.cosine_similarity)
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    (a, b), _ = promote(x1, x2, to_float=True)
    d = canon_dims(dim, ndim(a))
    # torch's formula: each input divided by its norm, the norm clamped to eps outside
    # autograd (the clamp changes the value, not the derivative)
    from thunderx.primitives.higher_order import stop_gradient

    def unit(v):
        n = vector_norm(v, 2, d, keepdim=True)
        clamped = B.add(n, stop_gradient(B.sub(B.maximum(n, eps), n)))
        return B.div(v, S.broadcast_to(clamped, shape(v)))

    return R.reduce_sum(B.mul(unit(a), unit(b)), d)


@register(F.pairwise_distance, torch.pairwise_distance)
def _pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    (a, b), _ = promote(x1, x2, to_float=True)
    return vector_norm(B.add(B.sub(a, b), eps), p, -1, keepdim)


# ------------------------------------------------------------------------ embedding, attention


@register(F.embedding)
def embedding(
    input,
    weight,
    padding_idx=None,
    max_norm=None,
    norm_type=2.0,  # noqa: A002
    scale_grad_by_freq=False,
    sparse=False,
):
    if max_norm is not None:
        _renorm_rows(weight, input, max_norm, norm_type)
    out = I.take(weight, input, 0)
    if scale_grad_by_freq:
        # the gradient of each lookup is divided by how often its index occurs in the batch
        from thunderx.primitives.higher_order import stop_gradient as _sg

        n = shape(weight)[0]
        flat = S.reshape(input, (math.prod(shape(input)),))
        ones = C.full(shape(flat), 1.0, dtype(weight))
        freq = I.index_add(C.full((n,), 0.0, dtype(weight)), flat, ones, 0)
        inv = S.broadcast_in_dim(
            B.div(1.0, I.take(freq, input, 0)), shape(out), tuple(range(ndim(input)))
        )
        scaled = B.mul(out, inv)
        out = B.add(scaled, _sg(B.sub(out, scaled)))
    if padding_idx is not None:
        # no gradient flows to the padding row
        from thunderx.primitives.higher_order import stop_gradient

        pad = B.eq(input, padding_idx % shape(weight)[0])
        padb = S.broadcast_in_dim(pad, shape(out), tuple(range(ndim(pad))))
        out = U.select(padb, stop_gradient(out), out)
    return out


def _renorm_rows(weight, input, max_norm, norm_type) -> None:
    """torch.embedding_renorm_, which F.embedding(max_norm=...) runs on the weight in place and
    outside autograd before the lookup: each row that `input` looks up whose norm exceeds
    max_norm is scaled by max_norm / (norm + 1e-7), the norm compared and the scale computed in
    float64 as torch's kernel does. The weight takes the new rows as any in-place write under
    `torch.no_grad()`: a captured tensor now or after each call of a jit program, a jit argument
    after each call, grad's input at the caller (its derivative stays the plain lookup's), a
    batched write refused where torch.func refuses it."""
    from thunderx.lang.inplace import mutate

    with torch.no_grad():
        n = shape(weight)[0]
        flat = S.reshape(input, (math.prod(shape(input)),))
        hits = I.index_add(
            C.full((n,), 0.0, torch.float32), flat, C.full(shape(flat), 1.0, torch.float32), 0
        )
        norms = convert(vector_norm(weight, norm_type, -1, keepdim=True), torch.float64)
        over = B.and_p.bind(B.gt(norms, float(max_norm)), S.reshape(B.gt(hits, 0.0), (n, 1)))
        scale = convert(B.div(float(max_norm), B.add(norms, 1e-7)), dtype(weight))
        rows = B.mul(weight, S.broadcast_to(scale, shape(weight)))
        new = U.select(S.broadcast_to(over, shape(weight)), rows, weight)
        mutate(weight, new, "F.embedding(max_norm=...)", detached=True)


@register(F.one_hot)
def _one_hot(x, num_classes=-1):
    if num_classes < 0:
        raise unsupported("F.one_hot without num_classes", "the output shape depends on the data")
    iota = C.iota(torch.int64, shape(x) + (num_classes,), ndim(x))
    return U.convert(
        B.eq(S.broadcast_in_dim(x, shape(x) + (num_classes,), tuple(range(ndim(x)))), iota),
        torch.int64,
    )
