"""Complex inputs and outputs in reverse mode: torch's cotangent convention, JAX's `holomorphic`.

Rules transpose with JAX's pairing `Re(ct * t)`; torch's is `Re(conj(ct) * t)`, so reverse mode's
entry points conjugate the cotangents going in and coming out (`to_torch`): `vjp` and `grad` of
a real function of complex `z` then give torch.func's answer (the conjugate Wirtinger derivative,
times 2). `holomorphic=True` (JAX's, for `grad`, `value_and_grad`, `jacrev`, `jacfwd`, `hessian`)
asks for the complex derivative `f'(z)` of a complex function instead.
"""

from __future__ import annotations

from thunderx import tree
from thunderx.ad_util import Zero
from thunderx.core import get_aval
from thunderx.errors import user_frame


def _conj(x):
    if type(x) is Zero or x is None or not get_aval(x).dtype.is_complex:
        return x
    from thunderx.primitives.complex import conj

    return conj(x)


def conj_leaves(values: list) -> list:
    """Conjugate the complex leaves (identity on real ones, and on symbolic zeros)."""
    return [_conj(v) for v in values]


def conj_tree(x):
    return tree.map(_conj, x)


def check(holomorphic: bool, dyn, name: str) -> None:
    """`holomorphic=True` needs complex inputs (JAX's rule)."""
    if not isinstance(holomorphic, bool):
        raise TypeError(f"{name}: holomorphic must be a bool, got {type(holomorphic).__name__}")
    if holomorphic:
        for leaf in tree.leaves(dyn):
            a = get_aval(leaf)
            if not a.dtype.is_complex:
                raise TypeError(
                    f"{name} with holomorphic=True requires complex inputs, got {a.str_short()} "
                    f"(at {user_frame()})"
                )


def check_output(holomorphic: bool, aval, name: str) -> None:
    """A complex output needs `holomorphic=True` in `grad` (JAX's and torch.func's rule)."""
    if aval.dtype.is_complex and not holomorphic:
        raise TypeError(
            f"{name} requires a real-valued output, got {aval.str_short()} (at {user_frame()}); "
            "for the complex derivative of a holomorphic function pass holomorphic=True, or "
            "differentiate a real function of it (e.g. .abs() or .real)"
        )
    if holomorphic and not aval.dtype.is_complex:
        raise TypeError(
            f"{name} with holomorphic=True requires a complex output, got {aval.str_short()} "
            f"(at {user_frame()})"
        )
