"""torch.func's API on thunderx's transforms: `import thunderx.func as func` stands in for
`import torch.func as func`.

The top-level thunderx API keeps JAX's contract (a has_aux function's aux may hold any Python
values, outputs may be any pytree of tensors and Python scalars, `argnums` may be a list,
`value_and_grad` returns `(value, grad)`). This namespace keeps torch.func's instead, on top of
the same transforms (each function here is a thin wrapper: checks, then the thunderx transform):

- `grad_and_value` returns `(grad, value)`; `grad`'s function must return a scalar tensor;
- `argnums` is an int or a tuple of ints (a list is refused), checked when the function is called;
- a has_aux function returns a 2-tuple whose aux is a tensor or a pytree of tensors only;
- the differentiated inputs are tensors (Python numbers are refused) and `jvp`'s primals a tuple;
- outputs are tensors or pytrees of tensors, non-empty (`None` and `()` are refused);
- `vmap`'s `in_dims` is an int or a tuple, and keyword arguments are passed through unbatched;
- an `autograd.Function` must define `setup_context` (torch.func's rule for transforms).

A breach raises the exception class torch.func raises (RuntimeError, or ValueError where torch
does), as a thunderx error carrying torch.func's words and the user's line. `functionalize` is
not offered: thunderx traces are functional already, and an identity stand-in would hide that
mutating an input is refused under `grad` and `jit`; nor is `rearrange` (functorch.dim's).

>>> import thunderx.func as func
>>> func.grad_and_value(lambda x: (x ** 2).sum())(torch.tensor([1., 2.]))
(tensor([2., 4.]), tensor(5.))
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import optree

# a module utility (it turns off running-stat tracking in place), not a transform: torch's own,
# re-exported so the namespace is complete
from torch.func import replace_all_batch_norm_modules_

from thunderx import func_checks as C
from thunderx.api import functional_call, stack_module_state
from thunderx.core import get_aval, is_tensor_like
from thunderx.errors import (
    ArgumentValueError,
    FuncContractError,
    TransformArgumentTypeError,
    TransformArgumentValueError,
)
from thunderx.lang.autograd_function import require_setup_context
from thunderx.transforms import ad as _ad
from thunderx.transforms import jacobians as _jac
from thunderx.transforms import vmap as _vmap

__all__ = [
    "debug_unwrap",
    "functional_call",
    "grad",
    "grad_and_value",
    "hessian",
    "jacfwd",
    "jacrev",
    "jvp",
    "linearize",
    "replace_all_batch_norm_modules_",
    "stack_module_state",
    "vjp",
    "vmap",
]


def _contract(fun: Callable) -> Callable:
    """Run a wrapper with torch.func's autograd.Function rule in force."""

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        with require_setup_context():
            return fun(*args, **kwargs)

    return wrapper


# -------------------------------------------------------------------------------- transforms


def grad_and_value(func: Callable, argnums: int | tuple = 0, has_aux: bool = False) -> Callable:
    """torch.func.grad_and_value: `(gradient, value)`, or `(gradient, (value, aux))` with
    has_aux. `func` returns a scalar tensor (and aux, a tensor pytree, with has_aux)."""

    def scalar(out) -> None:
        if not is_tensor_like(out):
            raise FuncContractError(
                f"{C.GRAD}: Expected f(*args) to return a Tensor, got {type(out)} {C.at()}"
            )
        nd = len(get_aval(out).shape)
        if nd != 0:
            raise FuncContractError(
                f"{C.GRAD}: Expected f(*args) to return a scalar Tensor, got tensor with {nd} "
                f"dims. Maybe you wanted to use the vjp or jacrev APIs instead? {C.at()}"
            )

    def checked(*args, **kwargs):
        res = func(*args, **kwargs)
        scalar(C.split_aux(res, C.GRAD)[0] if has_aux else res)
        return res

    @_contract
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums = C.normalize_argnums(argnums, len(args))
        C.check_differentiable([args[i] for i in ((nums,) if isinstance(nums, int) else nums)])
        value, g = _ad.value_and_grad(checked, nums, has_aux)(*args, **kwargs)
        return g, value

    return wrapper


def grad(func: Callable, argnums: int | tuple = 0, has_aux: bool = False) -> Callable:
    """torch.func.grad: the gradient of a scalar-tensor function, `(gradient, aux)` with
    has_aux."""
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


@_contract
def vjp(func: Callable, *primals, has_aux: bool = False):
    """torch.func.vjp: `(output, vjp_fn)` or `(output, vjp_fn, aux)`; `vjp_fn(cotangents)`
    returns a tuple with one cotangent per primal."""
    C.check_differentiable(primals)
    has_aux = bool(has_aux)
    f = C.checked(func, C.VJP, has_aux, C.check_float_outputs)
    res = _ad.vjp(f, *primals, has_aux=has_aux)
    out, fn = res[0], res[1]
    out_tree = C.torch_structure(out)
    out_avals = [get_aval(o) for o in C.torch_leaves(out)]

    def vjp_fn(cotangents, retain_graph: bool = True, create_graph: bool | None = None):
        ct_tree = C.torch_structure(cotangents)
        if ct_tree != out_tree:
            raise TransformArgumentValueError(
                f"Expected pytree structure of cotangents to be the same as pytree structure of "
                f"outputs to the function. cotangents: {ct_tree}, primal output: {out_tree} "
                f"{C.at()}"
            )
        cts = []
        for i, (ct, a) in enumerate(zip(C.torch_leaves(cotangents), out_avals)):
            if not is_tensor_like(ct):
                raise TransformArgumentTypeError(
                    f"vjp_fn: cotangent {i} must be a Tensor, got {type(ct)} {C.at()}"
                )
            ca = get_aval(ct)
            if tuple(ca.shape) != tuple(a.shape):
                raise TransformArgumentValueError(
                    f"Mismatch in shape: grad_output[{i}] has a shape of {tuple(ca.shape)} and "
                    f"output[{i}] has a shape of {tuple(a.shape)} {C.at()}"
                )
            # torch.autograd casts a floating cotangent to its output's dtype
            both_float = ca.dtype.is_floating_point and a.dtype.is_floating_point
            cts.append(ct.to(a.dtype) if both_float and ca.dtype != a.dtype else ct)
        return fn(optree.tree_unflatten(out_tree, cts))

    return (out, vjp_fn, res[2]) if has_aux else (out, vjp_fn)


@_contract
def jvp(
    func: Callable, primals: tuple, tangents: tuple, *, strict: bool = False, has_aux: bool = False
):
    """torch.func.jvp: `(output, jvp_out)` or `(output, jvp_out, aux)`. `primals` is a tuple;
    with `strict=True` an output independent of the inputs is an error."""
    if not isinstance(primals, tuple):
        raise TransformArgumentTypeError(
            f"{C.JVP}: Expected primals to be a tuple. E.g. it should be valid to call f(*primals), "
            f"got {type(primals).__name__} {C.at()}"
        )
    p_tree, t_tree = C.torch_structure(primals), C.torch_structure(tangents)
    if p_tree != t_tree:
        raise TransformArgumentValueError(
            f"{C.JVP}: Expected primals and tangents to have the same python structure. For "
            f"example, if primals is a tuple of 3 tensors, tangents also must be. Got primals "
            f"with structure {p_tree} and tangents with structure {t_tree} {C.at()}"
        )
    C.check_tensor_list(primals, C.JVP, "primals")
    C.check_tensor_list(tangents, C.JVP, "tangents")
    C.check_forward_primals(primals, tangents)
    has_aux = bool(has_aux)
    f = C.checked(func, C.JVP, has_aux)
    return _ad.jvp(f, primals, tangents, has_aux=has_aux, strict=strict)


@_contract
def linearize(func: Callable, *primals) -> tuple[Any, Callable]:
    """torch.func.linearize: `(output, jvp_fn)`; `jvp_fn(*tangents)` applies the linearized map
    (tangents with the primals' structure, shapes and dtypes)."""
    C.check_tensor_list(primals, "linearize", "primals")
    out, f_jvp = _ad.linearize(C.checked(func, "linearize(f, *primals)", False), *primals)
    p_tree = C.torch_structure(primals)
    p_avals = [get_aval(p) for p in C.torch_leaves(primals)]

    def jvp_fn(*tangents):
        t_tree = C.torch_structure(tangents)
        if t_tree != p_tree:
            raise TransformArgumentValueError(
                f"Expected the tangents {t_tree} to have the same argspec as the primals "
                f"{p_tree} {C.at()}"
            )
        for i, (t, a) in enumerate(zip(C.torch_leaves(tangents), p_avals)):
            if not is_tensor_like(t):
                raise TransformArgumentTypeError(
                    f"linearize's jvp_fn: tangent:{i} must be a Tensor, got {type(t)} {C.at()}"
                )
            ta = get_aval(t)
            checks = (("shape", tuple(ta.shape), tuple(a.shape)), ("dtype", ta.dtype, a.dtype))
            for what, got, want in checks:
                if got != want:
                    raise TransformArgumentValueError(
                        f"tangent:{i} with {what} {got} in flattened pytree doesn't match the "
                        f"{what} {want} of the corresponding primal. {C.at()}"
                    )
        return f_jvp(*tangents)

    return out, jvp_fn


def jacrev(
    func: Callable,
    argnums: int | tuple = 0,
    *,
    has_aux: bool = False,
    chunk_size: int | None = None,
    _preallocate_and_copy: bool = False,
) -> Callable:
    """torch.func.jacrev: the Jacobian by reverse mode (real inputs and outputs)."""
    if not (chunk_size is None or chunk_size > 0):
        raise ArgumentValueError(f"jacrev: `chunk_size` should be greater than 0. {C.at()}")

    def outputs(out) -> None:
        C.check_float_outputs(out)
        C.error_if_complex("jacrev", out, inputs=False)

    @_contract
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        C.error_if_complex("jacrev", args, inputs=True)
        nums = C.normalize_argnums(argnums, len(args))
        C.check_differentiable([args[i] for i in ((nums,) if isinstance(nums, int) else nums)])
        f = C.checked(func, C.VJP, has_aux, outputs)
        return _jac.jacrev(f, nums, has_aux, chunk_size=chunk_size)(*args, **kwargs)

    return wrapper


def jacfwd(
    func: Callable, argnums: int | tuple = 0, has_aux: bool = False, *, randomness: str = "error"
) -> Callable:
    """torch.func.jacfwd: the Jacobian by forward mode; `randomness` as `vmap`'s."""
    C.check_randomness(randomness)

    @_contract
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        C.error_if_complex("jacfwd", args, inputs=True)
        nums = C.normalize_argnums(argnums, len(args))
        diff = tuple(args[i] for i in ((nums,) if isinstance(nums, int) else nums))
        C.check_tensor_list(diff, C.JVP, "primals")
        C.check_forward_primals(diff, diff)
        f = C.checked(func, C.JVP, has_aux, lambda o: C.error_if_complex("jacfwd", o, inputs=False))
        return _jac.jacfwd(f, nums, has_aux, randomness=randomness)(*args, **kwargs)

    return wrapper


def hessian(func: Callable, argnums: int | tuple = 0) -> Callable:
    """torch.func.hessian: `jacfwd(jacrev(func, argnums), argnums)`."""
    return jacfwd(jacrev(func, argnums), argnums)


def vmap(
    func: Callable,
    in_dims: int | tuple = 0,
    out_dims: int | tuple = 0,
    randomness: str = "error",
    *,
    chunk_size: int | None = None,
) -> Callable:
    """torch.func.vmap: map `func` over a dimension of its positional inputs (`in_dims`: an int
    or a tuple matching the inputs, None for unmapped); keyword arguments are not mapped."""
    C.check_randomness(randomness)

    @_contract
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if not isinstance(in_dims, (int, tuple)):
            raise ArgumentValueError(
                f"vmap({C.name(func)}, in_dims={in_dims}, ...)(<inputs>): expected `in_dims` to "
                f"be int or a (potentially nested) tuple matching the structure of inputs, got: "
                f"{type(in_dims)}. {C.at()}"
            )
        if not args:
            raise ArgumentValueError(
                f"vmap({C.name(func)})(<inputs>): got no inputs. Maybe you forgot to add inputs, "
                f"or you are trying to vmap over a function with no inputs. The latter is "
                f"unsupported. {C.at()}"
            )
        for d in C.torch_leaves(in_dims):
            if d is not None and not isinstance(d, int):
                raise ArgumentValueError(
                    f"vmap({C.name(func)}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={d} for "
                    f"an input but in_dim must be either an integer dimension or None. {C.at()}"
                )
        for d in C.torch_leaves(out_dims):
            if d is not None and not isinstance(d, int):
                raise ArgumentValueError(
                    f"vmap({C.name(func)}, ..., out_dims={out_dims}): `out_dims` must be an int, "
                    f"None or a python collection of ints representing where in the outputs the "
                    f"vmapped dimension should appear. {C.at()}"
                )

        def call(*a):
            out = func(*a, **kwargs)
            C.check_mapped_outputs(out, out_dims, C.name(func))
            return out

        mapped = _vmap.vmap(
            call,
            in_dims=in_dims,
            out_dims=out_dims,
            randomness=randomness,
            chunk_size=chunk_size,
        )
        return mapped(*args)

    return wrapper


def debug_unwrap(tensor: Any, *, recurse: bool = True) -> Any:
    """torch.func.debug_unwrap, a debugging aid: the value under a traced one. A vmapped value
    gives its physical tensor (the batch dim included), a differentiated one its primal; with
    `recurse`, down to a plain tensor. A value staged by jit has none and comes back unchanged,
    as does anything that is not traced.

    >>> vmap(lambda t: debug_unwrap(t).shape[0] + t)(torch.zeros(3))
    tensor([3., 3., 3.])
    """
    from thunderx.transforms.jvp import JVPTracer
    from thunderx.transforms.vmap import BatchTracer

    while True:
        if isinstance(tensor, BatchTracer):
            inner = tensor.val
        elif isinstance(tensor, JVPTracer):
            inner = tensor.primal
        else:
            return tensor
        tensor = inner
        if not recurse:
            return tensor
