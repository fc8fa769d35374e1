"""linear_transpose: the transpose of a function promised to be linear (JAX's semantics)."""

from __future__ import annotations

from typing import Callable

import torch

from thunderx import tree
from thunderx.ad_util import instantiate
from thunderx.avals import is_float
from thunderx.core import Tracer, describe_rules, get_aval, transpose_rules
from thunderx.errors import ThunderxError, user_frame
from thunderx.ir import eval_jaxpr
from thunderx.shapes import aval_of_argument
from thunderx.tracing import trace_flat
from thunderx.transforms.partial_eval import check_versions, partial_eval_jaxpr, record_versions
from thunderx.transforms.transpose import backward_pass


class NotLinearError(ThunderxError, TypeError):
    """The function given to `linear_transpose` is not linear in its arguments."""


def linear_transpose(fun: Callable, *primals) -> Callable:
    """The transpose of the linear function `fun`, traced at the shapes and dtypes of `primals`
    (tensors or ShapeDtypeStructs; their values are not used). The result takes one argument
    with the structure of `fun`'s output (the output cotangent) and returns a tuple of
    cotangents with the structure of `primals`.

    `fun` must be linear: an operation that is not (`sin`, a product of two inputs, a
    comparison) raises `NotLinearError` naming it, and so does an affine offset such as `x + 1`
    (checked by evaluating at zero, when the function's constants are concrete values).

    >>> w = torch.tensor([[1., 2.], [3., 4.], [5., 6.]])
    >>> f_t = thunderx.linear_transpose(lambda x: w @ x, thunderx.ShapeDtypeStruct((2,), torch.float32))
    >>> f_t(torch.tensor([1., 0., 0.]))
    (tensor([1., 2.]),)
    """
    leaves, in_tree = tree.flatten(primals)
    in_avals = [aval_of_argument(x, "linear_transpose").strip_weak() for x in leaves]
    for i, a in enumerate(in_avals):
        if not is_float(a.dtype):
            raise TypeError(
                f"linear_transpose: input leaf {i} is {a.str_short()}; a linear function's inputs "
                f"are floating point (at {user_frame()})"
            )

    def flat(*xs):
        return tree.flatten(fun(*tree.unflatten(in_tree, xs)))

    closed, out_tree = trace_flat(flat, in_avals)
    out_avals = [a.strip_weak() for a in closed.out_avals]
    known, linear, out_unknowns, n_res = partial_eval_jaxpr(closed.jaxpr, [True] * len(leaves))
    for e in linear.eqns:
        if e.outputs and e.prim not in transpose_rules:
            what = describe_rules[e.prim](**e.params) if e.prim in describe_rules else None
            raise NotLinearError(
                f"linear_transpose: the function is not linear: {what or repr(e.prim.name)} is "
                f"applied to a value that depends on the inputs (at {user_frame()})"
            )
    vals = eval_jaxpr(known, closed.consts)
    residuals = vals[len(vals) - n_res :]
    constant_outs = iter(vals[: len(vals) - n_res])
    outs_at_zero = iter(
        eval_jaxpr(linear, [], *residuals, *[_zeros(a) for a in in_avals])
        if _concrete(residuals)
        else []
    )
    for i, unknown in enumerate(out_unknowns):
        value = next(outs_at_zero, None) if unknown else next(constant_outs)
        if _nonzero(value):
            raise NotLinearError(
                f"linear_transpose: the function is not linear: output leaf {i} is not zero at "
                "zero inputs (an affine offset such as `x + 1`, an output that does not depend "
                f"on the inputs, or a nonlinear operation such as `1 / x`) (at {user_frame()})"
            )

    # the residuals (the function's captured tensors among them) are read when a cotangent comes
    versions = record_versions(residuals)

    def transposed(out_cotangent):
        ct_leaves, ct_tree = tree.flatten(out_cotangent)
        if ct_tree != out_tree:
            raise TypeError(
                f"linear_transpose: the cotangent's structure {ct_tree} does not match the "
                f"function's output {out_tree} (at {user_frame()})"
            )
        for i, (c, a) in enumerate(zip(ct_leaves, out_avals)):
            ca = get_aval(c)
            if ca.shape != a.shape or ca.dtype != a.dtype:
                raise TypeError(
                    f"linear_transpose: cotangent leaf {i} is {ca.str_short()}, expected "
                    f"{a.str_short()} like the output (at {user_frame()})"
                )
        cts = [c for c, u in zip(ct_leaves, out_unknowns) if u]
        if versions:
            check_versions(linear, residuals, versions, "after linear_transpose traced it")
        try:
            cts_in = backward_pass(linear, residuals, cts)
        except TypeError as e:  # a rule refusing a nonlinear use (x * x, a divisor, ...)
            raise NotLinearError(f"linear_transpose: the function is not linear: {e}") from e
        return tuple(tree.unflatten(in_tree, [instantiate(c) for c in cts_in]))

    return transposed


def _zeros(aval):
    return torch.zeros(aval.shape, dtype=aval.dtype, device=aval.device)


def _concrete(values) -> bool:
    return not any(isinstance(v, Tracer) for v in values)


def _nonzero(value) -> bool:
    """Whether a concrete value is known to differ from zero (tracers are not inspected)."""
    if value is None or isinstance(value, Tracer):
        return False
    if isinstance(value, torch.Tensor):
        return bool((value != 0).any())
    return value != 0
