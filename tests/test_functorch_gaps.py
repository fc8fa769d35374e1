"""torch functions and error classes that PyTorch's functorch tests use, each against torch.func
(or eager torch) as the oracle: function spellings of in-place methods, result_type,
silu_backward, new_empty_strided, tensor_split with non-increasing indices, and shape errors
raised as the class torch raises."""

import pytest
import torch
import torch.func as tf

import thunderx as tx


def close(a, b):
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", ["clamp_min_", "clamp_max_", "abs_", "sigmoid_", "clamp_"])
def test_inplace_function_spellings_under_vmap_and_grad(name):
    op = getattr(torch, name)
    args = {"clamp_min_": (0.1,), "clamp_max_": (0.1,), "clamp_": (-0.2, 0.3)}.get(name, ())

    def f(x):
        y = x * 1.5  # a value created inside the function may be mutated
        op(y, *args)
        return y

    x = torch.randn(4, 3, dtype=torch.float64)
    close(tx.vmap(f)(x), tf.vmap(f)(x))
    close(tx.grad(lambda t: f(t).sum())(x), tf.grad(lambda t: f(t).sum())(x))
    close(tx.jit(f)(x), f(x))


def test_inplace_function_with_batched_bound():
    def f(x, lo):
        y = x.clone()
        torch.clamp_min_(y, lo)
        return y

    x, lo = torch.randn(5, 3), torch.randn(5, 3)
    close(tx.vmap(f)(x, lo), tf.vmap(f)(x, lo))


@pytest.mark.parametrize(
    "other",
    [
        torch.randn(4, dtype=torch.float64),
        torch.randint(10, (4,)),
        1,
        1.6,
        torch.tensor(1.6, dtype=torch.float64),
        torch.tensor(3),
    ],
    ids=["f64", "i64", "int", "float", "0d-f64", "0d-i64"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16])
def test_result_type(other, dtype):
    def f(a, b):
        return torch.ones((), dtype=torch.result_type(a, b))

    ax = 0 if isinstance(other, torch.Tensor) and other.ndim else None
    a = torch.ones(4, 2, dtype=dtype)
    mine = tx.vmap(f, in_axes=(0, ax))(a, other)
    ref = tf.vmap(f, in_dims=(0, ax))(a, other)
    assert mine.dtype == ref.dtype
    assert tx.jit(lambda a: f(a, other))(a).dtype == f(a, other).dtype


def test_silu_backward():
    op = torch.ops.aten.silu_backward
    g, x = torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64)
    close(tx.vmap(op)(g, x), tf.vmap(op)(g, x))
    close(tx.vmap(op, in_axes=(None, 0))(g[0], x), tf.vmap(op, in_dims=(None, 0))(g[0], x))
    # silu's backward is the derivative of silu: the vjp of F.silu with cotangent g
    close(tx.jit(op)(g, x), tf.vjp(torch.nn.functional.silu, x)[1](g)[0])
    # linear in g, so d/dg sum(op(g, x)) is op(ones, x) (torch has no derivative for it)
    close(tx.grad(lambda g: op(g, x).sum())(g), op(torch.ones_like(g), x))


def test_new_empty_strided_shape_and_dtype():
    out = tx.vmap(lambda x: x.new_empty_strided([2, 3], [3, 1], dtype=torch.float64))(
        torch.randn(5)
    )
    ref = tf.vmap(lambda x: x.new_empty_strided([2, 3], [3, 1], dtype=torch.float64))(
        torch.randn(5)
    )
    assert out.shape == ref.shape and out.dtype == ref.dtype
    with pytest.raises(RuntimeError):
        tx.vmap(lambda x: x.new_empty_strided([2, 3], [1]))(torch.randn(5))


@pytest.mark.parametrize(
    "indices", [[50, 100, 212, 345, 0, 378, 890], [3, -5, 1000, 2000], [-1], [7, 7, 2]]
)
def test_tensor_split_indices_as_python_slices(indices):
    x = torch.randn(3, 1024)
    mine = tx.vmap(lambda t: torch.tensor_split(t, indices))(x)
    ref = tf.vmap(lambda t: torch.tensor_split(t, indices))(x)
    assert len(mine) == len(ref)
    for a, b in zip(mine, ref):
        close(a, b)
    jitted = tx.jit(lambda t: torch.tensor_split(t, indices, 1))(x)
    for a, b in zip(jitted, torch.tensor_split(x, indices, 1)):
        close(a, b)


@pytest.mark.parametrize(
    "op, a, b",
    [
        (torch.mm, (7, 2, 2, 2), (7, 2)),
        (torch.bmm, (7, 2, 2, 2), (7, 2)),
        (torch.mv, (7, 2, 2, 2), (7, 2)),
        (torch.dot, (7, 2, 2, 2), (7, 2)),
        (torch.matmul, (7, 2, 3), (7, 4, 2)),
    ],
    ids=["mm", "bmm", "mv", "dot", "matmul"],
)
def test_shape_errors_are_runtime_errors(op, a, b):
    x, y = torch.randn(*a), torch.randn(*b)
    with pytest.raises(RuntimeError):
        tf.vmap(op)(x, y)
    with pytest.raises(RuntimeError) as info:
        tx.vmap(op)(x, y)
    assert isinstance(info.value, ValueError)  # thunderx's earlier class, kept


def test_split_sections_error_is_runtime_error():
    with pytest.raises(RuntimeError):
        torch.split(torch.randn(5), [2, 2])
    with pytest.raises(RuntimeError, match="do not sum to 5"):
        tx.jit(lambda t: torch.split(t, [2, 2]))(torch.randn(5))


# ------------------------------------------------- in-place updates of vmap inputs (torch.func's)


def _both(f, args, **kw):
    """Run f under thunderx.vmap and torch.func.vmap on separate copies of the inputs; return
    (results, inputs afterwards) for each."""
    dims = {k.replace("axes", "dims"): v for k, v in kw.items()}
    mine_args = [a.clone() for a in args]
    ref_args = [a.clone() for a in args]
    mine = tx.vmap(f, **kw)(*mine_args)
    ref = tf.vmap(f, **dims)(*ref_args)
    return (mine, mine_args), (ref, ref_args)


@pytest.mark.parametrize(
    "name, f, shapes, kw",
    [
        ("clamp_min_", lambda t, u: t.clamp_min_(u), [(4, 3), (4, 3)], {}),
        ("torch.clamp_max_", lambda t, u: torch.clamp_max_(t, u), [(4, 3), (4, 3)], {}),
        ("fill_ in_axes=2", lambda t: t.fill_(0.1), [(2, 5, 4, 3)], {"in_axes": 2}),
        ("zero_ out_axes", lambda t: t.zero_(), [(2, 4, 3)], {"in_axes": 1, "out_axes": 1}),
        ("view write", lambda t, u: (t[::2].copy_(u[::2]), t)[1], [(4, 3), (4, 3)], {}),
        ("returns a reduction", lambda t: t.mul_(2).sum(), [(4, 3)], {}),
        ("nested", tx.vmap(lambda t: t.mul_(2), in_axes=1), [(2, 3, 4)], {"in_axes": 2}),
    ],
)
def test_vmap_writes_input_updates_back(name, f, shapes, kw):
    args = [torch.randn(*s, dtype=torch.float64) for s in shapes]
    if name == "nested":  # torch.func's own vmap inside its reference
        ref_f = tf.vmap(lambda t: t.mul_(2), in_dims=1)
        mine_args, ref_args = [a.clone() for a in args], [a.clone() for a in args]
        close(tx.vmap(f, **kw)(*mine_args), tf.vmap(ref_f, in_dims=2)(*ref_args))
        close(mine_args, ref_args)
        return
    (mine, mine_args), (ref, ref_args) = _both(f, args, **kw)
    close(mine, ref)
    close(mine_args, ref_args)  # the caller's tensors were updated alike


def test_vmap_input_update_reaches_traced_caller():
    """Under jit or grad the written-back update is an in-place op on the enclosing value."""

    def g(t):
        y = t * 1
        tx.vmap(lambda r: r.add_(1))(y)
        return y

    z = torch.randn(4, 3, dtype=torch.float64)
    close(tx.jit(g)(z), z + 1)
    close(tx.grad(lambda t: g(t).pow(2).sum())(z), 2 * (z + 1))


def test_vmap_input_updates_refused_where_unsound():
    from thunderx.lang.inplace import MutationError

    x = torch.randn(4, 3)

    def reads_other(t, u):  # torch sees t's update through u (the same memory)
        t.add_(1)
        return u * 1

    with pytest.raises(MutationError, match="shares memory"):  # aliasing between arguments
        tx.vmap(reads_other)(x, x)
    with pytest.raises(MutationError, match="shares memory"):
        tx.vmap(lambda t, u: t.add_(u))(x, x[::1])  # a view of the same memory
    mine, ref = x.clone(), x.clone()  # chunked: each chunk writes its part of the caller's
    close(tx.vmap(lambda t: t.add_(1), chunk_size=3)(mine), tf.vmap(lambda t: t.add_(1))(ref))
    close(mine, ref)
    with pytest.raises(MutationError, match="input of the transformed function"):
        tx.jit(tx.vmap(lambda t: t.add_(1)))(x)  # jit's inputs stay immutable
    with pytest.raises(RuntimeError):  # an unmapped input written with mapped values
        tf.vmap(lambda t, u: t.add_(u), in_dims=(None, 0))(torch.randn(3), x)
    with pytest.raises(MutationError):
        tx.vmap(lambda t, u: t.add_(u), in_axes=(None, 0))(torch.randn(3), x)
    before = x.clone()
    with pytest.raises(MutationError):
        tx.vmap(lambda t, u: t.add_(u), in_axes=(0, 0))(x, x)
    close(x, before)  # a refused update leaves the caller's tensor alone


def _copy_in(x, y):
    x.copy_(y)
    return x


def _view_write(x, y):
    view = x[:, ::2]
    view.copy_(y)
    return view, x


def _base_write(x, y):
    view = x[0, ::2]
    x.copy_(y)
    return x, view


@pytest.mark.parametrize(
    "f, shapes, in_axes",
    [
        (_copy_in, [(3, 2), (3, 2)], 1),
        (_copy_in, [(3, 2), (3,)], (1, 1, None, None)),
        (_view_write, [(2, 6, 2), (2, 2, 3)], (2, 2, 1, 1)),
        (_base_write, [(2, 2, 6), (2, 2, 6)], (1, 1, 1, 1)),
    ],
    ids=["copy", "copy-unbatched-source", "write-through-view", "write-base-read-view"],
)
def test_jvp_under_vmap_writes_primal_and_tangent_back(f, shapes, in_axes):
    """torch.func's TestVmapJvpInplaceView cases: the caller's primal and tangent change."""
    xs, ys = shapes
    args = [torch.randn(*xs), torch.randn(*xs), torch.randn(*ys), torch.randn(*ys)]

    def push(jvp):
        return lambda x, xt, y, yt: jvp(f, (x, y), (xt, yt))

    mine, ref = [a.clone() for a in args], [a.clone() for a in args]
    close(tx.vmap(push(tx.jvp), in_axes)(*mine), tf.vmap(push(tf.jvp), in_axes)(*ref))
    for a, b in zip(mine, ref):
        close(a, b)


def test_jvp_input_update_refusals():
    from thunderx.lang.inplace import MutationError

    x = torch.randn(3)
    before = x.clone()
    with pytest.raises(MutationError, match="shares memory"):  # primal is its own tangent
        tx.jvp(lambda t: t.mul_(2), (x,), (x,))
    close(x, before)
    with pytest.raises(MutationError):  # reverse mode keeps its inputs immutable
        tx.vjp(lambda t: t.mul_(2), x)
    with pytest.raises(MutationError):
        tx.jit(lambda t: tx.jvp(lambda u: u.mul_(2), (t,), (t * 0 + 1,)))(x)


class _Triple(torch.autograd.Function):
    """forward doubles, backward triples: a derivative that differs from forward's own."""

    @staticmethod
    def forward(ctx, t):
        return t * 2

    @staticmethod
    def backward(ctx, g):
        return g * 3


def test_bound_function_apply_taken_before_the_transform_is_refused():
    """`grad(MyFn.apply)` binds torch's own apply before thunderx's is installed; it would run
    forward under no_grad (a silently zero derivative), so it is refused with the fix."""
    from thunderx.errors import UnsupportedOperationError

    x = torch.tensor(1.0)
    ref = torch.autograd.grad(_Triple.apply(x.requires_grad_()), x)[0]
    x = x.detach()
    close(tx.grad(lambda t: _Triple.apply(t))(x), ref)  # looked up inside: its backward
    with pytest.raises(UnsupportedOperationError, match=r"lambda \*a: _Triple.apply"):
        tx.grad(_Triple.apply)(x)
    close(_Triple.apply(x), x * 2)  # torch's own apply outside transforms, untouched
