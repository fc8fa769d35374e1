"""Errors raised by thunderx. Each names what went wrong and where in the user's code."""

from __future__ import annotations

import os
import sys

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = None


def _torch_dir() -> str:
    global _TORCH_DIR
    if _TORCH_DIR is None:
        import torch

        _TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
    return _TORCH_DIR


def _ours(path: str) -> bool:
    """Whether an absolute path is a file of thunderx's packages."""
    return any(path.startswith(os.path.join(_PKG_DIR, d) + os.sep) for d in _PACKAGES)


def _internal(filename: str) -> bool:
    f = os.path.abspath(filename)
    return (
        _ours(f)
        or f.startswith(_torch_dir() + os.sep)
        or "optree" in f
        or f.startswith("<frozen")
        or filename.startswith("<thunderx")
    )


def user_frame() -> str:
    """`file:line` of the innermost frame outside thunderx, torch and optree."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if not _internal(code.co_filename):
            return f"{code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def note_torch_func(exc: BaseException) -> None:
    """Where an exception leaving a thunderx transform was raised inside one of torch.func's own
    transforms (one thunderx does not run in its place: thunderx/torch_func.py routes the public
    ones, so functorch's internals called directly), say so and what to use: torch.func's
    transforms refuse thunderx's traced values, and their own message
    ("argument of type: ...Tracer") names neither. Adds a note; the exception is unchanged."""
    functorch = os.path.join(_torch_dir(), "_functorch")
    tb, caller = exc.__traceback__, None
    while tb is not None:
        f = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if f.startswith(functorch + os.sep):
            if caller is None or _ours_below(tb):  # thunderx ran it (thunderx/torch_func.py)
                return
            name = tb.tb_frame.f_code.co_name
            use = f"thunderx.func.{name}" if name in _FUNC_NAMES else "thunderx.func"
            exc.add_note(
                f"thunderx: torch.func's own transform ({name}) was called at {caller} on values "
                f"traced by a thunderx transform, which torch.func cannot see. Inside thunderx "
                f"transforms use {use} (torch.func's API run by thunderx)."
            )
            return
        if not _internal(f):
            caller = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next


def _ours_below(tb) -> bool:
    while tb is not None:
        if _ours(os.path.abspath(tb.tb_frame.f_code.co_filename)):
            return True
        tb = tb.tb_next
    return False


_PACKAGES = ("thunderx", "primitives", "transforms")
_FUNC_NAMES = ("linearize", "vmap", "grad", "vjp", "jvp", "jacrev", "jacfwd", "hessian")


class ThunderxError(Exception):
    """Base class of all thunderx errors."""


class UnsupportedOperationError(ThunderxError, NotImplementedError):
    """A torch function has no decomposition into thunderx primitives."""


class ConcretizationError(ThunderxError, TypeError, RuntimeError):
    """A traced value was used where a concrete Python value is required. Also a RuntimeError:
    torch.func raises that for the same misuse (`.item()` or data-dependent control flow under
    vmap), so code catching torch's error keeps working."""


class UnexpectedTracerError(ThunderxError, RuntimeError):
    """A tracer escaped the transform that created it."""


class RandomnessError(ThunderxError, ValueError, RuntimeError):
    """A random op under `vmap(randomness="error")` (torch.func raises a RuntimeError)."""


class IndependentOutputError(ThunderxError, RuntimeError):
    """`jvp(..., strict=True)`: an output does not depend on the inputs (torch.func's check)."""


class ModifiedInPlaceError(ThunderxError, RuntimeError):
    """A tensor that reverse mode keeps for the backward pass (a captured tensor, one the function
    made itself, a residual) was modified in place after the differentiated computation read it:
    the derivative would read its new value. torch raises a RuntimeError for the same misuse
    (torch.func refuses in-place writes to captured tensors; torch.autograd's version counter
    check refuses saved tensors modified in place)."""


class FuncContractError(ThunderxError, RuntimeError):
    """A use torch.func refuses, refused by `thunderx.func` (which keeps torch.func's contract):
    a function's output or aux is not a tensor (pytree), a has_aux output is not a pair, an
    autograd.Function lacks `setup_context`. A RuntimeError, as torch.func raises."""


class ShapeError(ThunderxError, ValueError, RuntimeError):
    """Operands whose shapes do not fit a torch function (`mm` of a 3-D tensor, `split` sections
    that do not add up to the size). Also a RuntimeError, as torch raises for the same call, so
    code catching torch's error keeps working."""


class MissingRuleError(ThunderxError, NotImplementedError):
    """A primitive lacks the rule a transform needs."""


class ArgumentTypeError(ThunderxError, TypeError):
    """An argument of a thunderx API has the wrong type (the message names the API, the argument
    and the user's line)."""


class ArgumentValueError(ThunderxError, ValueError):
    """An argument of a thunderx API has the right type but an invalid value (out of range,
    wrong shape, a tree that does not match)."""


class TransformArgumentTypeError(ArgumentTypeError, RuntimeError):
    """A transform's argument has the wrong type where torch.func raises a RuntimeError for the
    same misuse (`argnums` not an int or a tuple of ints, jvp's primals not a tuple), so code
    catching torch's error keeps working."""


class TransformArgumentValueError(ArgumentValueError, RuntimeError):
    """A transform's argument has an invalid value where torch.func raises a RuntimeError for
    the same misuse (`argnums` empty, out of range or repeated; tangents whose structure differs
    from the primals')."""


class AxisOutOfRangeError(ArgumentValueError, IndexError):
    """An axis (dim) argument outside a value's rank. Also an IndexError, as torch raises for a
    dim out of range ("Dimension out of range")."""


def unsupported(name: str, detail: str = "") -> UnsupportedOperationError:
    msg = f"{name} is not supported under thunderx tracing (called at {user_frame()})"
    if detail:
        msg += f": {detail}"
    return UnsupportedOperationError(msg)


def concretization(what: str, aval, fix: str = "") -> ConcretizationError:
    fix = fix or (
        "use thunderx.lax.cond / switch for data-dependent branches, thunderx.lax.while_loop / "
        "fori_loop / scan for data-dependent loops, torch.where for elementwise choices, or mark "
        "the argument static (jit's static_argnums / static_argnames); outside jit and vmap, "
        "grad, vjp, jvp, linearize, jacfwd, jacrev and hessian see concrete values"
    )
    # torch.func's words for the same misuse, so code matching its messages keeps working
    phrase = _TORCH_PHRASES.get(what, "")
    return ConcretizationError(
        f"{what} of a traced value {aval.str_short()} at {user_frame()}: its value is not known "
        f"while tracing{phrase}. Instead, {fix}."
    )


_TORCH_PHRASES = {
    ".item()": " (calling .item() on a Tensor)",
    "bool()": " (a Tensor used in data-dependent control flow)",
    "int()": " (a Tensor used in data-dependent control flow)",
    "float()": " (a Tensor used in data-dependent control flow)",
}
