"""Run-time printing and callbacks that survive every transform (`jax.debug` for torch code).

A plain Python `print` inside `jit` runs once, when the function is traced, and shows tracers.
`thunderx.debug.print` becomes an equation of the program instead, so it prints the values on
every call of the compiled function:

- under `jit`: on every call, with that call's values;
- under `grad` / `vjp` / `jvp`: in the forward pass, with the primal values (never tangents);
- under `vmap`: once per batch element, in batch order, with that element's values (as
  `jax.debug.print` does), so `vmap` over 3 rows prints 3 lines.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable

from thunderx import tree
from thunderx.core import is_tensor_like
from thunderx.primitives.debug import debug_callback


def split_arrays(args: tuple, kwargs: dict) -> tuple[list, Callable]:
    """The tensors among the leaves of (args, kwargs), and a function rebuilding (args, kwargs)
    from run-time values of those tensors (the other leaves kept as they are)."""
    leaves, treedef = tree.flatten((args, kwargs))
    is_array = [is_tensor_like(x) for x in leaves]
    others = [x for x, a in zip(leaves, is_array) if not a]

    def rebuild(values) -> tuple:
        it_values, it_others = iter(values), iter(others)
        full = [next(it_values) if a else next(it_others) for a in is_array]
        return tree.unflatten(treedef, full)

    return [x for x, a in zip(leaves, is_array) if a], rebuild


def callback(fn: Callable[..., Any], *args, **kwargs) -> None:
    """Call `fn(*args, **kwargs)` with the run-time values of `args` (pytrees of tensors and
    other values; non-tensor leaves are passed as they are). Its return value is ignored.

    >>> seen = []
    >>> f = thunderx.jit(lambda x: (thunderx.debug.callback(seen.append, x * 2), x + 1)[1])
    >>> _ = f(torch.tensor(1.)); _ = f(torch.tensor(5.))
    >>> seen
    [tensor(2.), tensor(10.)]
    """
    if not callable(fn):
        raise TypeError(f"debug.callback: expected a callable, got {type(fn).__name__}")
    arrays, rebuild = split_arrays(args, kwargs)

    def flat_callback(*values):
        call_args, call_kwargs = rebuild(values)
        fn(*call_args, **call_kwargs)

    flat_callback.__name__ = getattr(fn, "__name__", type(fn).__name__)
    debug_callback(flat_callback, *arrays)


def print(fmt: str, *args, **kwargs) -> None:  # noqa: A001 - jax.debug.print's name
    """Print `fmt.format(*args, **kwargs)` with run-time values (see the module docstring for
    when it prints under each transform).

    >>> f = thunderx.jit(lambda x: (thunderx.debug.print("x = {}", x), x * 2)[1])
    >>> _ = f(torch.tensor(1.))
    x = 1.0
    >>> _ = f(torch.tensor(3.))
    x = 3.0
    >>> _ = thunderx.vmap(lambda x: thunderx.debug.print("row {x}", x=x))(torch.eye(2))
    row tensor([1., 0.])
    row tensor([0., 1.])
    """
    if not isinstance(fmt, str):
        raise TypeError(f"debug.print: the format must be a str, got {type(fmt).__name__}")

    def format_and_print(*values, **kw_values):
        builtins.print(
            fmt.format(*map(_show, values), **{k: _show(v) for k, v in kw_values.items()})
        )

    format_and_print.__name__ = "print"
    callback(format_and_print, *args, **kwargs)


def _show(x):
    # a 0-dim tensor prints as its number (`x = 1.0`, and format specs like {:.3f} work)
    if is_tensor_like(x) and x.ndim == 0:
        return x.item()
    return x
