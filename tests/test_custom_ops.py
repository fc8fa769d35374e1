"""Custom operators (`torch.library.custom_op`) under thunderx's transforms: the kernel is opaque,
the rules are the ones its author registered (fake implementation, `register_autograd`,
`register_vmap`). Oracles: torch.func on the same function written with torch's own ops (torch.func
itself refuses `grad` of such an operator in torch 2.13), a loop for vmap, and eager torch."""

import pytest
import torch
import torch.func as tf

import thunderx as tx

F64 = torch.float64
calls = {"sin": 0, "scaled_vmap": 0}


@torch.library.custom_op("thunderx_test::sin", mutates_args=())
def op_sin(x: torch.Tensor) -> torch.Tensor:
    calls["sin"] += 1
    return torch.sin(x)


@op_sin.register_fake
def _(x):
    return torch.empty_like(x)


def _sin_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _sin_backward(ctx, g):
    (x,) = ctx.saved_tensors
    return g * torch.cos(x)


op_sin.register_autograd(_sin_backward, setup_context=_sin_setup)


# several outputs, a Python argument, a keyword-only argument with a default, a batching rule
@torch.library.custom_op("thunderx_test::scaled", mutates_args=())
def op_scaled(
    x: torch.Tensor, w: torch.Tensor, power: int, *, shift: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor]:
    return (x * w) ** power + shift, x - w


@op_scaled.register_fake
def _(x, w, power, *, shift=0.5):
    return torch.empty_like(x), torch.empty_like(x)


def _scaled_setup(ctx, inputs, keyword_only_inputs, output):
    x, w, power = inputs
    ctx.save_for_backward(x, w)
    ctx.power = power


def _scaled_backward(ctx, g0, g1):
    x, w = ctx.saved_tensors
    d = ctx.power * (x * w) ** (ctx.power - 1) * g0
    return d * w + g1, d * x - g1, None


op_scaled.register_autograd(_scaled_backward, setup_context=_scaled_setup)


@op_scaled.register_vmap
def _(info, in_dims, x, w, power, *, shift=0.5):
    calls["scaled_vmap"] += 1
    x = x.movedim(in_dims[0], 0) if in_dims[0] is not None else x.expand(info.batch_size, *x.shape)
    w = w.movedim(in_dims[1], 0) if in_dims[1] is not None else w.expand(info.batch_size, *w.shape)
    return op_scaled(x, w, power, shift=shift), (0, 0)


# no derivative registered: vmap and jit only
@torch.library.custom_op("thunderx_test::plain", mutates_args=())
def op_plain(x: torch.Tensor) -> torch.Tensor:
    return x.exp() - 1


@op_plain.register_fake
def _(x):
    return torch.empty_like(x)


def scaled_ref(x, w, power, shift=0.5):
    return (x * w) ** power + shift, x - w


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def x_(*shape, seed=0):
    return torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(seed))


def f_sin(lib_sin):
    return lambda x: (lib_sin(x) * x).sum()


TRANSFORMS = {
    "grad": lambda f, x: tx.grad(f)(x[0]),
    "jit(grad)": lambda f, x: tx.jit(tx.grad(f))(x[0]),
    "vmap(grad)": lambda f, x: tx.vmap(tx.grad(f))(x),
    "grad(vmap)": lambda f, x: tx.grad(lambda b: tx.vmap(f)(b).sum())(x),
    "jit(vmap(grad))": lambda f, x: tx.jit(tx.vmap(tx.grad(f)))(x),
    "jacrev(jacrev)": lambda f, x: tx.jacrev(tx.jacrev(f))(x[0]),
}
REFERENCE = {
    "grad": lambda f, x: tf.grad(f)(x[0]),
    "jit(grad)": lambda f, x: tf.grad(f)(x[0]),
    "vmap(grad)": lambda f, x: tf.vmap(tf.grad(f))(x),
    "grad(vmap)": lambda f, x: tf.grad(lambda b: tf.vmap(f)(b).sum())(x),
    "jit(vmap(grad))": lambda f, x: tf.vmap(tf.grad(f))(x),
    "jacrev(jacrev)": lambda f, x: tf.hessian(f)(x[0]),
}


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_registered_backward_under_reverse_mode(transform):
    x = x_(3, 5)
    got = TRANSFORMS[transform](f_sin(op_sin), x)
    close(got, REFERENCE[transform](f_sin(torch.sin), x))


def test_the_kernel_runs_as_the_operator_not_a_decomposition():
    x = x_(5)
    before = calls["sin"]
    close(tx.jit(op_sin)(x), torch.sin(x))
    close(tx.grad(f_sin(op_sin))(x), tf.grad(f_sin(torch.sin))(x))
    assert calls["sin"] > before  # the author's kernel ran
    text = tx.jit(op_sin).lower(x).as_text()
    assert "torch_call" in text and "thunderx_test" in text, text


@pytest.mark.parametrize("power", [1, 3])
def test_python_and_keyword_only_arguments_and_several_outputs(power):
    x, w = x_(4, seed=1), x_(4, seed=2)

    def loss(lib_op):
        def f(x, w):
            a, b = lib_op(x, w, power, shift=0.25)
            return (a * b).sum()

        return f

    got = tx.grad(loss(op_scaled), argnums=(0, 1))(x, w)
    close(got, tf.grad(loss(scaled_ref), argnums=(0, 1))(x, w))
    close(tx.jit(tx.grad(loss(op_scaled), argnums=(0, 1)))(x, w), got)


@pytest.mark.parametrize("in_dims", [(0, 0), (0, None), (None, 1)])
def test_registered_vmap_rule_runs_once_for_the_batch(in_dims):
    xs, ws = x_(3, 4, seed=3), x_(4, 3, seed=4) if in_dims[1] == 1 else x_(3, 4, seed=4)
    x0 = xs if in_dims[0] == 0 else xs[0]
    w0 = ws if in_dims[1] is not None else ws[0]
    before = calls["scaled_vmap"]
    got = tx.vmap(lambda x, w: op_scaled(x, w, 2), in_dims=in_dims)(x0, w0)
    assert calls["scaled_vmap"] == before + 1
    want = tf.vmap(lambda x, w: scaled_ref(x, w, 2), in_dims=in_dims)(x0, w0)
    close(got, want)
    per_example = tx.vmap(
        tx.grad(lambda x, w: op_scaled(x, w, 2)[0].sum(), argnums=(0, 1)), in_dims=in_dims
    )(x0, w0)
    ref = tf.vmap(
        tf.grad(lambda x, w: scaled_ref(x, w, 2)[0].sum(), argnums=(0, 1)), in_dims=in_dims
    )(x0, w0)
    close(per_example, ref)


def test_without_a_vmap_rule_vmap_loops_over_the_examples():
    xs = x_(3, 2, 4, seed=5)
    close(tx.vmap(op_plain)(xs), torch.stack([op_plain(x) for x in xs]))
    close(tx.vmap(tx.vmap(op_plain), in_dims=1)(xs), xs.movedim(1, 0).exp() - 1)
    close(tx.jit(tx.vmap(op_plain, in_dims=2))(xs), xs.movedim(2, 0).exp() - 1)


def test_without_a_registered_derivative_grad_names_the_fix():
    with pytest.raises(Exception, match="register_autograd"):
        tx.grad(lambda x: op_plain(x).sum())(x_(3))


def test_forward_mode_is_refused_with_a_clear_error():
    with pytest.raises(TypeError, match="forward-mode"):
        tx.jvp(op_sin, (x_(3),), (x_(3, seed=1),))


def test_outside_transforms_the_operator_is_torchs_own():
    x = x_(3).requires_grad_()
    (g,) = torch.autograd.grad(op_sin(x).sum(), x)
    close(g, torch.cos(x.detach()))
