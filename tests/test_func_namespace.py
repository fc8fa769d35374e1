"""`thunderx.func` against torch.func as the oracle: the same values for the same calls, and the
same exception class (RuntimeError or ValueError) for the same misuse."""

import pytest
import torch
import torch.func as tf

import thunderx
import thunderx.func as xf
from thunderx.errors import ThunderxError


def _close(a, b):
    la, sa = torch.utils._pytree.tree_flatten(a)
    lb, sb = torch.utils._pytree.tree_flatten(b)
    assert sa == sb, (sa, sb)
    for x, y in zip(la, lb):
        torch.testing.assert_close(x, y)


@pytest.fixture
def x():
    return torch.randn(3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def f_scalar(x, y):
    return (x.sin() * y).sum()


def f_aux(x):
    return x.sin().sum(), {"c": x.cos(), "t": [x.tan()]}


# ---------------------------------------------------------------------------------- values


def test_grad_and_value_order_and_aux(x):
    y = x * 2
    _close(xf.grad_and_value(f_scalar)(x, y), tf.grad_and_value(f_scalar)(x, y))
    _close(
        xf.grad_and_value(f_scalar, argnums=(0, 1))(x, y), tf.grad_and_value(f_scalar, (0, 1))(x, y)
    )
    _close(xf.grad(f_aux, has_aux=True)(x), tf.grad(f_aux, has_aux=True)(x))
    _close(xf.grad_and_value(f_aux, has_aux=True)(x), tf.grad_and_value(f_aux, has_aux=True)(x))


def test_grad_kwargs_pass_through(x):
    def f(x, *, scale):
        return (x * scale).pow(2).sum()

    _close(xf.grad(f)(x, scale=3.0), tf.grad(f)(x, scale=3.0))


def test_vjp_jvp_linearize(x):
    out, fn = xf.vjp(torch.sin, x)
    ref_out, ref_fn = tf.vjp(torch.sin, x)
    _close(out, ref_out)
    _close(fn(x), ref_fn(x))
    out, fn, aux = xf.vjp(lambda t: (t.exp(), {"a": t.cos()}), x, has_aux=True)
    ro, rfn, raux = tf.vjp(lambda t: (t.exp(), {"a": t.cos()}), x, has_aux=True)
    _close((out, aux, fn(x)), (ro, raux, rfn(x)))
    _close(xf.jvp(torch.sin, (x,), (x,)), tf.jvp(torch.sin, (x,), (x,)))
    g = lambda t: (t.sin(), [t.cos()])  # noqa: E731
    _close(xf.jvp(g, (x,), (x,), has_aux=True), tf.jvp(g, (x,), (x,), has_aux=True))
    out, jfn = xf.linearize(torch.sin, x)
    ro, rjfn = tf.linearize(torch.sin, x)
    _close((out, jfn(x)), (ro, rjfn(x)))


def test_jacobians_and_hessian(x):
    y = x + 1
    for api in ("jacrev", "jacfwd"):
        mine, ref = getattr(xf, api), getattr(tf, api)
        _close(mine(f_scalar, argnums=(0, 1))(x, y), ref(f_scalar, argnums=(0, 1))(x, y))
        h = lambda t: {"s": t.sin(), "p": [t * t]}  # noqa: E731
        _close(mine(h)(x), ref(h)(x))
        a = lambda t: (t.exp(), t.cos())  # noqa: E731
        _close(mine(a, has_aux=True)(x), ref(a, has_aux=True)(x))
    _close(xf.hessian(f_scalar)(x, y), tf.hessian(f_scalar)(x, y))
    _close(xf.jacrev(torch.sin, chunk_size=2)(x), tf.jacrev(torch.sin, chunk_size=2)(x))


def test_vmap_spellings(x):
    m = torch.randn(4, 3, dtype=torch.float64)
    _close(xf.vmap(torch.dot, in_dims=(0, None))(m, x), tf.vmap(torch.dot, in_dims=(0, None))(m, x))
    _close(xf.vmap(torch.sin, 1, 1)(m), tf.vmap(torch.sin, 1, 1)(m))
    _close(xf.vmap(torch.sum, chunk_size=3)(m), tf.vmap(torch.sum, chunk_size=3)(m))

    def f(row, *, bias):  # keyword arguments are not mapped in torch.func
        return row + bias

    _close(xf.vmap(f)(m, bias=x), tf.vmap(f)(m, bias=x))


def test_torch_func_leniencies_kept(x):
    """What torch.func accepts, thunderx.func accepts with the same result: a truthy has_aux, a
    cotangent of another float dtype (cast to the output's), a non-tensor output under
    out_dims=None, out_dims=(1,) for a single output."""
    f = lambda t: (t.sin(), t.cos())  # noqa: E731
    _close(xf.jvp(f, (x,), (x,), has_aux=1), tf.jvp(f, (x,), (x,), has_aux=1))
    o32 = x.float()
    mine = xf.vjp(torch.sin, o32)[1](x)
    ref = tf.vjp(torch.sin, o32)[1](x)
    assert mine[0].dtype == ref[0].dtype == torch.float32
    _close(mine, ref)
    m = torch.randn(4, 3)
    g = lambda t: (t * 2, 1.5)  # noqa: E731
    _close(xf.vmap(g, out_dims=(0, None))(m), tf.vmap(g, out_dims=(0, None))(m))
    _close(xf.vmap(torch.sin, out_dims=(1,))(m), tf.vmap(torch.sin, out_dims=(1,))(m))


def test_module_utilities():
    model = torch.nn.Linear(3, 2).double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    inp = torch.randn(5, 3, dtype=torch.float64)
    loss = lambda p: xf.functional_call(model, p, (inp,)).sum()  # noqa: E731
    ref_loss = lambda p: tf.functional_call(model, p, (inp,)).sum()  # noqa: E731
    _close(xf.grad(loss)(params), tf.grad(ref_loss)(params))
    models = [torch.nn.Linear(3, 2) for _ in range(3)]
    _close(xf.stack_module_state(models)[0], tf.stack_module_state(models)[0])
    assert xf.replace_all_batch_norm_modules_ is tf.replace_all_batch_norm_modules_


def test_top_level_keeps_jax_contract(x):
    """thunderx's own API stays lenient where torch.func's contract refuses."""
    g, aux = thunderx.grad(lambda t: (t.sum(), {"step": 3}), has_aux=True)(x)
    assert aux == {"step": 3}
    torch.testing.assert_close(g, torch.ones_like(x))
    assert thunderx.grad(f_scalar, argnums=[0])(x, x)[0].shape == x.shape
    with pytest.raises(RuntimeError):
        xf.grad(lambda t: (t.sum(), {"step": 3}), has_aux=True)(x)


# ------------------------------------------------------------------------------ misuse


class Ctx(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def _misuses(x):
    s = x.sum()
    return {
        "argnums list": lambda m: m.grad(torch.mul, argnums=[0])(s, s),
        "argnums str entry": lambda m: m.grad(torch.mul, argnums=("0",))(s, s),
        "argnums out of range": lambda m: m.grad(torch.mul, argnums=2)(s, s),
        "argnums repeated": lambda m: m.grad(torch.mul, argnums=(0, -2))(s, s),
        "argnums empty": lambda m: m.grad(torch.mul, argnums=())(s, s),
        "grad non-scalar": lambda m: m.grad(torch.sin)(x),
        "grad non-tensor output": lambda m: m.grad(lambda t: 1.0)(x),
        "grad aux list": lambda m: m.grad(lambda t: [t.sum(), t], has_aux=True)(x),
        "grad aux int": lambda m: m.grad(lambda t: (t.sum(), 1), has_aux=True)(x),
        "grad aux None": lambda m: m.grad(lambda t: (t.sum(), [t, None]), has_aux=True)(x),
        "grad float input": lambda m: m.grad(lambda t: t * 2)(2.0),
        "vjp aux triple": lambda m: m.vjp(lambda t: (t, t, t), x, has_aux=True),
        "vjp aux str": lambda m: m.vjp(lambda t: (t, {"a": "abc"}), x, has_aux=True),
        "vjp None output": lambda m: m.vjp(lambda t: None, x),
        "vjp empty output": lambda m: m.vjp(lambda t: (), x),
        "vjp int output": lambda m: m.vjp(lambda t: 1, x),
        "vjp integer dtype": lambda m: m.vjp(lambda t: t.long(), x),
        "vjp cotangent tree": lambda m: m.vjp(lambda t: [t, t], x)[1]((x, x)),
        "jvp primals list": lambda m: m.jvp(torch.sin, [x], [x]),
        "jvp primals tensor": lambda m: m.jvp(torch.sin, x, (x,)),
        "jvp tangents tree": lambda m: m.jvp(torch.sin, (x,), [x]),
        "jvp float primal": lambda m: m.jvp(torch.sin, (1.0,), (x,)),
        "jvp empty": lambda m: m.jvp(torch.sin, (), ()),
        "jvp aux list": lambda m: m.jvp(lambda t: [t, t], (x,), (x,), has_aux=True),
        "jvp str output": lambda m: m.jvp(lambda t: "abc", (x,), (x,)),
        "jvp strict": lambda m: m.jvp(lambda t: torch.ones(3), (x,), (x,), strict=True),
        "jacrev empty output": lambda m: m.jacrev(lambda a, b: ())(x, x),
        "jacrev aux float": lambda m: m.jacrev(lambda t: (t, 1.0), has_aux=True)(x),
        "jacrev chunk_size": lambda m: m.jacrev(torch.sin, chunk_size=0),
        "jacrev complex input": lambda m: m.jacrev(torch.sin)(x.to(torch.complex128)),
        "jacfwd None output": lambda m: m.jacfwd(lambda t: None)(x),
        "jacfwd bool output": lambda m: m.jacfwd(lambda t: True)(x),
        "linearize tangent shape": lambda m: m.linearize(torch.sin, x)[1](x[:2]),
        "vmap in_dims list": lambda m: m.vmap(torch.mul, [0, 0])(x, x),
        "vmap in_dims str": lambda m: m.vmap(torch.mul, "lol")(x, x),
        "vmap no inputs": lambda m: m.vmap(lambda: x)(),
        "vmap randomness": lambda m: m.vmap(torch.sin, randomness="sometimes")(x),
        "vmap int output": lambda m: m.vmap(lambda t: 1)(x),
        "vmap None output": lambda m: m.vmap(lambda t: (t, None))(x),
        "vmap out_dims str": lambda m: m.vmap(torch.sin, out_dims="a")(x),
        "vmap in_dims float": lambda m: m.vmap(torch.sin, in_dims=(0.5,))(x),
        "jvp tangent shape": lambda m: m.jvp(torch.sin, (x,), (x[:2],)),
        "jvp integer primal": lambda m: m.jvp(torch.sin, (x.long(),), (x.long(),)),
        "vjp cotangent shape": lambda m: m.vjp(torch.sin, x)[1](x[:2]),
        "vjp integer primal": lambda m: m.vjp(torch.sin, x.long()),
        "grad integer input": lambda m: m.grad(lambda t: t.sum())(x.long()),
        "jacfwd integer input": lambda m: m.jacfwd(torch.sin)(x.long()),
        "jacfwd complex input": lambda m: m.jacfwd(torch.sin)(x.to(torch.complex128)),
        "jacfwd complex output": lambda m: m.jacfwd(lambda t: t.to(torch.complex128))(x),
        "Function without setup_context": lambda m: m.grad(lambda t: Ctx.apply(t).sum())(x),
        "vmap Function without setup_context": lambda m: m.vmap(lambda t: Ctx.apply(t))(x),
    }


MISUSES = sorted(_misuses(torch.zeros(3)))


def _raised(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return e
    return None


@pytest.mark.parametrize("name", MISUSES)
def test_same_exception_class_as_torch_func(name, x):
    call = _misuses(x)[name]
    ref = _raised(lambda: call(tf))
    assert ref is not None, f"torch.func accepts {name}: the case is wrong"
    mine = _raised(lambda: call(xf))
    assert mine is not None, f"thunderx.func accepts {name}; torch.func raises {ref!r}"
    # torch.func raises a plain RuntimeError or ValueError; thunderx raises its own error class,
    # which is also that built-in class, naming the user's line
    base = RuntimeError if isinstance(ref, RuntimeError) else type(ref)
    assert isinstance(mine, base), (name, mine, ref)
    assert isinstance(mine, ThunderxError), (name, mine)
    assert __file__ in str(mine), (name, str(mine))


def test_torch_func_words_in_messages(x):
    """Code matching torch.func's messages keeps working: the key phrases are kept."""
    phrases = {
        "grad aux list": "output of function f should be a tuple",
        "grad aux int": "Expected tensors, got unsupported type",
        "argnums list": "must be int or Tuple",
        "argnums out of range": "but only",
        "argnums repeated": "must be unique",
        "vjp None output": "Expected f to be a function that has non-empty output",
        "vjp int output": r"expected f\(\*primals\) to return only tensors",
        "jvp primals tensor": "Expected primals to be a tuple",
        "jvp tangents tree": "same python structure",
        "jvp float primal": "only contain Tensors",
        "jvp empty": "at least one Tensor",
        "vmap in_dims list": r"expected `in_dims` to be int or a \(potentially nested\) tuple",
        "Function without setup_context": "setup_context",
    }
    calls = _misuses(x)
    for name, phrase in phrases.items():
        with pytest.raises(Exception, match=phrase):
            calls[name](xf)
        with pytest.raises(Exception, match=phrase):
            calls[name](tf)


def test_state_restored_after_contract_error(x):
    with pytest.raises(RuntimeError):
        xf.grad(lambda t: Ctx.apply(t).sum())(x)
    # thunderx's own transforms still accept a ctx-style Function afterwards (its backward)
    torch.testing.assert_close(
        thunderx.grad(lambda t: Ctx.apply(t).sum())(x), 2 * torch.ones(3, dtype=x.dtype)
    )


def test_debug_unwrap_matches_torch_func(x):
    m = torch.randn(3, 4, dtype=torch.float64)

    def seen_under(mod):
        seen = []

        def keep(t, **kw):
            seen.append(mod.debug_unwrap(t, **kw))
            return t.sum()

        mod.vmap(lambda t: keep(t) + t)(m)
        mod.grad(keep)(m)
        mod.vmap(mod.grad(keep))(m)
        mod.vmap(mod.grad(lambda t: keep(t, recurse=False)))(m)
        seen.append(mod.debug_unwrap(m))  # not traced: returned as is
        return seen

    mine, ref = seen_under(xf), seen_under(tf)
    for a, b in zip(mine[:3] + mine[4:], ref[:3] + ref[4:]):
        _close(a, b)
    assert tuple(mine[3].shape) == tuple(ref[3].shape)  # one level only: still batched
    assert mine[4] is m
