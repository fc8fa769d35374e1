"""torch autograd through thunderx code that holds a custom derivative rule (a
`torch.autograd.Function`, `thunderx.custom_vjp`, `thunderx.custom_jvp`): the rule is the
derivative, as under `thunderx.grad` and as torch eager and torch.compile run a Function's
`backward`. Before, an eager vmap and the program torch autograd runs through `jit`
differentiated the rule's primal implementation instead: a gradient-reversal layer's gradient
came back with the wrong sign."""

from __future__ import annotations

import pytest
import torch

import thunderx as tx
from thunderx import lax

F64 = torch.float64


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -g


class SquareWithScaledBackward(torch.autograd.Function):
    """x**2 whose backward (3 x g) is differentiated again by a double backward."""

    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * g


class ScaledSquareVmappable(SquareWithScaledBackward):
    generate_vmap_rule = True  # torch.func's vmap (and jacrev) take it


def _loss(x):
    return (GradReverse.apply(x * 3) ** 2).sum() + SquareWithScaledBackward.apply(x).sum()


def _torch_grad(fn, x, create_graph=False):
    x = x.detach().requires_grad_()
    return torch.autograd.grad(fn(x), x, create_graph=create_graph)[0], x


@pytest.mark.parametrize("wrap", ["jit", "jit(jit)", "vmap", "disable_jit"])
def test_a_torch_autograd_function_keeps_its_backward_under_torch_autograd(wrap):
    x = torch.randn(4, dtype=F64)
    want, _ = _torch_grad(_loss, x)  # torch eager runs the Functions' backwards
    if wrap == "jit":
        fn = tx.jit(_loss)
    elif wrap == "jit(jit)":
        fn = tx.jit(lambda x: tx.jit(_loss)(x) * 1.0)
    elif wrap == "vmap":
        fn = lambda x: tx.vmap(_loss)(x[None]).sum()  # noqa: E731
    else:

        def fn(x):
            with tx.disable_jit():
                return tx.jit(_loss)(x)

    got, _ = _torch_grad(fn, x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(tx.grad(_loss)(x), want)  # thunderx's own reverse mode agrees


def test_double_backward_differentiates_the_backward_as_torch_does():
    x = torch.randn(3, dtype=F64)

    def first(fn):
        g, xr = _torch_grad(fn, x, create_graph=True)
        return torch.autograd.grad(g.sum(), xr)[0]

    f = lambda x: SquareWithScaledBackward.apply(x).sum()  # noqa: E731
    torch.testing.assert_close(first(tx.jit(f)), first(f))
    torch.testing.assert_close(first(f), torch.full_like(x, 3.0))


def test_custom_vjp_rule_is_torch_autograds_derivative_eagerly_under_vmap_and_jit():
    @tx.custom_vjp
    def clip_gradient(x):
        return x * 1.0

    clip_gradient.defvjp(lambda x: (x * 1.0, None), lambda _, g: (g.clamp(-0.1, 0.1),))
    x = torch.tensor([1.0, -2.0, 0.01], dtype=F64)
    want = (3 * torch.ones(3, dtype=F64)).clamp(-0.1, 0.1) * 3  # the rule, chained with x * 3
    for fn in (
        lambda x: clip_gradient(x * 3).sum(),
        lambda x: tx.vmap(clip_gradient)(x * 3).sum(),
        lambda x: tx.jit(clip_gradient)(x * 3).sum(),
        tx.jit(lambda x: clip_gradient(x * 3).sum()),
    ):
        torch.testing.assert_close(_torch_grad(fn, x)[0], want)
    torch.testing.assert_close(tx.grad(lambda x: clip_gradient(x * 3).sum())(x), want)


def test_custom_jvp_rule_transposed_is_torch_autograds_derivative():
    @tx.custom_jvp
    def f(x, y):
        return torch.sin(x) * y, x.sum()

    # a rule that is not sin's derivative, so that the test tells the two apart
    f.defjvp(lambda p, t: (f(*p), (10 * t[0] * p[1] + t[1], t[0].sum())))
    x, y = torch.randn(3, dtype=F64), torch.randn(3, dtype=F64)
    w = torch.randn(3, dtype=F64)

    def loss(x, y):
        a, b = f(x, y)
        return (a * w).sum() + 2 * b

    # the transpose of the rule's linear map at (x, y) applied to the cotangents (w, 2)
    want_x, want_y = 10 * w * y + 2, w
    for fn in (loss, tx.jit(loss), lambda x, y: tx.vmap(loss)(x[None], y[None]).sum()):
        xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
        gx, gy = torch.autograd.grad(fn(xr, yr), (xr, yr))
        torch.testing.assert_close(gx, want_x)
        torch.testing.assert_close(gy, want_y)
    gx, gy = tx.grad(loss, argnums=(0, 1))(x, y)
    torch.testing.assert_close(gx, want_x)
    torch.testing.assert_close(gy, want_y)


def test_rules_in_a_loop_body_under_jit_keep_their_backward():
    def loop(x):
        def body(c, _):
            return GradReverse.apply(c) * 2.0, None

        return lax.scan(body, x, None, length=3)[0].sum()

    def unrolled(x):
        for _ in range(3):
            x = GradReverse.apply(x) * 2.0
        return x.sum()

    x = torch.randn(4, dtype=F64)
    want, _ = _torch_grad(unrolled, x)
    torch.testing.assert_close(want, -8.0 * torch.ones_like(x))
    torch.testing.assert_close(_torch_grad(tx.jit(loop), x)[0], want)


def test_a_rule_closing_over_a_value_torch_differentiates_is_refused():
    """As under thunderx.grad: the rule cannot give the closed-over value's derivative."""
    w = torch.randn(3, dtype=F64, requires_grad=True)

    def f(x, w):
        @tx.custom_vjp
        def scale(x):
            return x * w

        scale.defvjp(lambda x: (x * w, None), lambda _, g: (g,))
        return scale(x).sum()

    x = torch.randn(3, dtype=F64, requires_grad=True)
    with pytest.raises(TypeError, match="closes over a value that is being differentiated"):
        tx.jit(f)(x, w)


def test_without_torch_autograd_the_rules_stay_inlined():
    x = torch.randn(5, dtype=F64)
    f = tx.jit(_loss)
    torch.testing.assert_close(f(x), _loss(x))
    entry, _ = f.jit_function._lookup((x,), {})
    # the program jit runs inlines the rules' primal; the one torch autograd runs through calls
    # them (whose derivative is the rule)
    assert "custom_vjp_call" not in entry.program.source
    assert entry.program.source_plain.count("_impl_custom_vjp_call(") == 2


def test_thunderx_own_rules_stay_inlined_in_the_program_torch_autograd_runs_through():
    """The rules of thunderx's decompositions (torch's derivative conventions: var, xlogy,
    logit, logsumexp) are not a user's backward: torch autograd differentiates their primal,
    which the program it runs through inlines. Bridging them as calls made a jitted var +
    logsumexp loss's backward 3.6x slower. Where the primal's derivative loses digits (sinc at
    1e-17) the op is a composite whose kernel torch differentiates itself."""

    def f(x):
        y = torch.var(x) + torch.special.xlogy(x, x + 2).sum() + torch.logit(x.sigmoid()).sum()
        return y + torch.logsumexp(x, 0)

    x = torch.rand(6, dtype=F64) + 0.5
    want, _ = _torch_grad(f, x)
    jf = tx.jit(f)
    torch.testing.assert_close(_torch_grad(jf, x)[0], want)
    torch.testing.assert_close(_torch_grad(lambda x: tx.vmap(f)(x[None]).sum(), x)[0], want)
    entry, _ = jf.jit_function._lookup((x,), {})
    assert "_impl_custom_jvp_call" not in entry.program.source_plain


def test_torch_func_transforms_of_jit_programs_holding_rules():
    """torch.func.grad / jacrev / vmap(grad) of a jitted function that holds rules (thunderx's
    own, inlined; a user's custom_vjp and custom_jvp, a Function): the bridge runs under
    torch.func's transforms
    (`setup_context` style, a generated vmap rule, thunderx's vjp for a custom_jvp's transpose
    where torch.func refuses torch.autograd.grad). Found by the differential test's
    torch.func(jit) check, which failed on every op with a rule."""
    import torch.func as tf

    @tx.custom_vjp
    def halve_gradient(x):
        return x * 1.0

    halve_gradient.defvjp(lambda x: (x * 1.0, None), lambda _, g: (g * 0.5,))

    @tx.custom_jvp
    def sine(x):
        return torch.sin(x)

    sine.defjvp(lambda p, t: (torch.sin(p[0]), torch.cos(p[0]) * t[0]))  # sin's own derivative

    def f(x, sin=sine):
        y = torch.logit(x.sigmoid()) + halve_gradient(sin(x))
        # torch.func takes only setup_context-style Functions, with a vmap rule under vmap
        return (ScaledSquareVmappable.apply(y) * y.cos()).sum() + torch.var(x)

    x = torch.tensor([0.3, -1.2, 2.0, 1e-3], dtype=F64)
    jf = tx.jit(f)
    torch.testing.assert_close(tf.grad(jf)(x), tf.grad(f)(x))
    torch.testing.assert_close(tf.jacrev(jf)(x), tf.jacrev(f)(x))
    xs = torch.stack([x, x * 0.5 + 0.1])
    torch.testing.assert_close(tf.vmap(tf.grad(jf))(xs), tf.vmap(tf.grad(f))(xs))
    # the rule is sin's derivative: the same as torch.func of torch.sin itself
    torch.testing.assert_close(tf.grad(jf)(x), tf.grad(lambda x: f(x, torch.sin))(x))
