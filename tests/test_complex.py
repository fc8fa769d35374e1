"""Complex numbers under every transform: values against torch eager, derivatives against
torch.func (torch's convention: the gradient of a real function of z is the conjugate Wirtinger
derivative, times 2), vmap against a loop, `holomorphic=True` against closed forms."""

import pytest
import torch
import torch.func as tf

import thunderx as tx

C128 = torch.complex128


def _z(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.complex(
        torch.randn(n, generator=g, dtype=torch.float64),
        torch.randn(n, generator=g, dtype=torch.float64),
    )


REAL_LOSSES = {
    "abs_of_square": lambda z: (z * z).abs().sum(),
    "modulus_squared": lambda z: (torch.real(z) ** 2 + torch.imag(z) ** 2).sum(),
    "z_conj_z": lambda z: (z * z.conj()).real.sum(),
    "angle": lambda z: torch.angle(z.exp() * z).sum(),
    "view_as_real": lambda z: (torch.view_as_real(torch.sin(z)) ** 2).sum(),
    "division": lambda z: (1 / (z + 3)).imag.sum(),
    "sgn": lambda z: (torch.sgn(z) * z.conj()).real.sum(),
    "polar": lambda z: torch.polar(z.abs(), torch.angle(z) * 2).real.sum(),
    "view_as_complex": lambda z: torch.view_as_complex(torch.view_as_real(z) * 2).abs().sum(),
    "complex_of_parts": lambda z: torch.complex(z.real * 2, z.imag.exp()).abs().sum(),
}


@pytest.mark.parametrize("name", sorted(REAL_LOSSES))
def test_gradient_of_a_real_loss_matches_torch_func(name):
    f, z = REAL_LOSSES[name], _z()
    want = tf.grad(f)(z)
    torch.testing.assert_close(tx.grad(f)(z), want)
    torch.testing.assert_close(tx.jit(tx.grad(f))(z), want)
    torch.testing.assert_close(tx.jit(f)(z), f(z))


@pytest.mark.parametrize("name", sorted(REAL_LOSSES))
def test_per_example_gradients_match_a_loop(name):
    f = REAL_LOSSES[name]
    zs = torch.stack([_z(seed=s) for s in range(3)])
    want = torch.stack([tf.grad(f)(z) for z in zs])
    torch.testing.assert_close(tx.vmap(tx.grad(f))(zs), want)


def test_vjp_and_jvp_of_complex_functions_match_torch_func():
    z, ct = _z(), _z(seed=1)
    for f in (torch.sin, torch.exp, lambda z: z * z.conj() + 1j * z, lambda z: torch.real(z) * z):
        out, vjp_fn = tx.vjp(f, z)
        _, want = tf.vjp(f, z)
        torch.testing.assert_close(vjp_fn(ct)[0], want(ct)[0])
        torch.testing.assert_close(tx.jvp(f, (z,), (ct,)), tf.jvp(f, (z,), (ct,)))


def test_holomorphic_derivatives_are_complex_derivatives():
    z = _z()
    torch.testing.assert_close(tx.grad(torch.sin, holomorphic=True)(z[0]), torch.cos(z[0]))
    torch.testing.assert_close(tx.grad(lambda z: z**3, holomorphic=True)(z[1]), 3 * z[1] ** 2)
    want = torch.diag(torch.cos(z))
    torch.testing.assert_close(tx.jacfwd(torch.sin, holomorphic=True)(z), want)
    torch.testing.assert_close(tx.jacrev(torch.sin, holomorphic=True)(z), want)
    torch.testing.assert_close(
        tx.hessian(lambda z: (z**3).sum(), holomorphic=True)(z), torch.diag(6 * z)
    )


def test_holomorphic_misuse_is_refused():
    z = _z()
    with pytest.raises(TypeError, match="real-valued output"):
        tx.grad(torch.sin)(z[0])
    with pytest.raises(TypeError, match="complex inputs"):
        tx.grad(torch.sin, holomorphic=True)(torch.tensor(1.0))
    with pytest.raises(TypeError, match="complex output"):
        tx.grad(torch.abs, holomorphic=True)(z[0])
    torch.testing.assert_close(tx.grad(lambda z: z.abs())(z[0]), tf.grad(lambda z: z.abs())(z[0]))


def test_parts_values_and_conventions_match_torch():
    z = torch.tensor([3 + 4j, 0j, -1 - 0j], dtype=C128)
    for f in (torch.real, torch.imag, torch.conj, torch.abs, torch.angle, torch.sgn):
        torch.testing.assert_close(tx.jit(f)(z), f(z).resolve_conj())
    # |z| and sgn at 0: derivative 0, as torch's
    torch.testing.assert_close(
        tx.grad(lambda z: z.abs().sum())(z), tf.grad(lambda z: z.abs().sum())(z)
    )
    x = torch.tensor([-2.0, 0.0, 3.0])
    torch.testing.assert_close(tx.jit(torch.angle)(x), torch.angle(x))
    assert tx.jit(lambda z: torch.tensor(z.is_conj()))(z).item() is False


def test_custom_vjp_speaks_torchs_convention_for_complex_values():
    @tx.custom_vjp
    def f(z):
        return z * z

    f.defvjp(lambda z: (z * z, z), lambda z, g: (g * 2 * z.conj(),))  # torch: g * conj(f'(z))
    z = _z()
    loss = lambda z: f(z).abs().sum()  # noqa: E731
    torch.testing.assert_close(tx.grad(loss)(z), tf.grad(lambda z: (z * z).abs().sum())(z))


def test_complex_and_polar_broadcast_their_operands():
    re, im = torch.randn(5, dtype=torch.float64), torch.tensor(0.5, dtype=torch.float64)

    def loss(a, b):
        return (torch.complex(a, b).abs() ** 2 + torch.polar(a.abs(), b).real).sum()

    torch.testing.assert_close(tx.jit(torch.complex)(re, im), torch.complex(re, im))
    torch.testing.assert_close(tx.jit(torch.polar)(re, im), torch.polar(re, im))
    torch.testing.assert_close(
        tx.grad(loss, argnums=(0, 1))(re, im), tf.grad(loss, argnums=(0, 1))(re, im)
    )
    bs = torch.randn(3, dtype=torch.float64)
    torch.testing.assert_close(
        tx.vmap(torch.complex, in_axes=(None, 0))(re, bs),
        torch.stack([torch.complex(re, b) for b in bs]),
    )


@pytest.mark.parametrize("name", ["cfloat", "cdouble", "chalf"])
def test_complex_conversion_methods(name):
    x = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    f = lambda a: getattr(a, name)()  # noqa: E731
    unbound = lambda a: getattr(torch.Tensor, name)(a)  # noqa: E731 - looked up inside
    for g in (f, unbound):
        got, want = tx.jit(g)(x), g(x)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(tx.vmap(g)(x), torch.stack([g(r) for r in x]))
    if name != "chalf":  # complex32 has no abs/pow kernels on CPU
        loss = lambda a: (f(a) * (1 + 2j)).abs().pow(2).sum()  # noqa: E731
        tol = 1e-5 if name == "cfloat" else 1e-7  # float64 grads of a complex64 computation
        torch.testing.assert_close(tx.grad(loss)(x), tf.grad(loss)(x), rtol=tol, atol=tol)


COMPLEX_SCALAR_CASES = {
    "mul": lambda a: a * (1 + 2j),
    "radd_imag": lambda a: 1j - a,
    "div": lambda a: a / (2 - 1j),
    "exp_of_imag": lambda a: (a * 1j).exp(),
    "where_scalars": lambda a: torch.where(a.real > 0, 1j, 2j) * a,
    "where_mixed": lambda a: torch.where(a.real > 0, a, 2j),
    "nonfinite_literal": lambda a: a * complex(float("inf"), 1.0),
    "after_reduction": lambda a: (a * 1j).sum() * 2j,
}


@pytest.mark.parametrize("name", COMPLEX_SCALAR_CASES)
@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.complex128])
def test_python_complex_scalars_are_literals(name, dt):
    # torch promotes a real tensor with a Python complex to the matching complex dtype
    f = COMPLEX_SCALAR_CASES[name]
    a = torch.randn(3, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(dt)
    want, got = f(a), tx.jit(f)(a)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True)
    torch.testing.assert_close(tx.vmap(f)(a[:, None]), tf.vmap(f)(a[:, None]), equal_nan=True)
    if name != "nonfinite_literal":
        loss = lambda v: f(v).abs().sum()  # noqa: E731
        torch.testing.assert_close(tx.jit(tx.grad(loss))(a), tf.grad(loss)(a))


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.complex64, torch.int64])
def test_jit_takes_python_complex_arguments(dt):
    # a dynamic, weakly typed argument (as a Python float is), with torch's promotion
    x = (torch.arange(3) + 1).to(dt)
    f = tx.jit(lambda a, s: a * s)
    for s in (1j, 2.5 - 0.5j, complex(float("nan"), 1.0)):
        got, want = f(x, s), x * s
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True)


HOLOMORPHIC = {
    **{
        n: getattr(torch, n)
        for n in (
            "sqrt",
            "rsqrt",
            "log",
            "log2",
            "log10",
            "log1p",
            "exp",
            "exp2",
            "expm1",
            "sin",
            "cos",
            "tan",
            "sinh",
            "cosh",
            "tanh",
            "asin",
            "acos",
            "atan",
            "asinh",
            "acosh",
            "atanh",
            "reciprocal",
            "sigmoid",
            "square",
            "sinc",
        )
    },
    "pow_scalar_exponent": lambda z: z**2.5,
    "pow_scalar_base": lambda z: 2.0**z,
    "pow_negative_scalar_base": lambda z: (-2.0) ** z,
    "pow_complex_scalar_base": lambda z: (1 + 2j) ** z,
    "cumprod": lambda z: z.cumprod(0),
}


@pytest.mark.parametrize("name", sorted(HOLOMORPHIC))
def test_elementwise_complex_derivatives_match_torch_func(name):
    # tanh and sigmoid took torch's backward kernels as their tangent (those multiply by the
    # conjugate derivative), acosh's derivative took the other branch for some z, and a Python
    # scalar base raised: silently wrong or refused before
    f, z, w = HOLOMORPHIC[name], _z(6) * 0.7, _z(6, seed=1) * 0.7

    def loss(v):
        return (f(v) * w).real.sum()

    want = tf.grad(loss)(z)
    torch.testing.assert_close(tx.grad(loss)(z), want)
    torch.testing.assert_close(tx.jit(tx.grad(loss))(z), want)
    torch.testing.assert_close(tx.jvp(f, (z,), (w,)), tf.jvp(f, (z,), (w,)))
    torch.testing.assert_close(tx.jit(f)(z), f(z))
