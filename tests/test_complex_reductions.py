"""Reductions of complex tensors that return real values (norms, variance, standard deviation):
values and dtypes against torch eager under jit and vmap (a loop), gradients against torch.func
(torch's convention for a real function of z). thunderx returned the complex sqrt(sum z^2) as
`vector_norm` and `matrix_norm('fro')`, a complex variance, and raised under grad."""

import pytest
import torch
import torch.func as tf

import thunderx as tx

from .complex_samples import complex_randn

L = torch.linalg


_z = complex_randn


REAL_OF_COMPLEX = {
    "vector_norm": lambda z: L.vector_norm(z),
    "vector_norm_1": lambda z: L.vector_norm(z, 1, dim=1),
    "vector_norm_0": lambda z: L.vector_norm(z, 0, dim=0),
    "vector_norm_3": lambda z: L.vector_norm(z, 3, dim=1, keepdim=True),
    "vector_norm_inf": lambda z: L.vector_norm(z, float("inf"), dim=0),
    "vector_norm_-2": lambda z: L.vector_norm(z, -2, dim=0),
    "vector_norm_half": lambda z: L.vector_norm(z, 0.5),
    "vector_norm_dtype": lambda z: L.vector_norm(z, dtype=torch.complex128),
    "linalg_norm": lambda z: L.norm(z),
    "linalg_norm_dim": lambda z: L.norm(z, dim=1),
    "tensor_norm": lambda z: z.norm(),
    "torch_norm_p1": lambda z: torch.norm(z, p=1, dim=0),
    "matrix_norm_fro": lambda z: L.matrix_norm(z),
    "matrix_norm_1": lambda z: L.matrix_norm(z, 1),
    "matrix_norm_inf": lambda z: L.matrix_norm(z, float("inf")),
    "matrix_norm_-1": lambda z: L.matrix_norm(z, -1),
    "dist": lambda z: torch.dist(z, z.flip(0)),
    "var": lambda z: z.var(0),
    "var_correction_0": lambda z: torch.var(z, 1, correction=0),
    "std": lambda z: z.std(1),
    "var_mean_var": lambda z: torch.var_mean(z, 0)[0],
    "std_mean_std": lambda z: torch.std_mean(z, 1)[0],
}


@pytest.mark.parametrize("name", sorted(REAL_OF_COMPLEX))
def test_real_reduction_of_a_complex_tensor_matches_torch(name):
    f, z = REAL_OF_COMPLEX[name], _z(4, 3)
    want = f(z)
    assert not want.dtype.is_complex
    for got in (tx.jit(f)(z), tx.vmap(f)(z[None])[0]):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    zs = torch.stack([z, _z(4, 3, seed=1)])
    torch.testing.assert_close(tx.vmap(f)(zs), torch.stack([f(w) for w in zs]))

    def loss(w):
        return f(w).sum()

    g = tf.grad(loss)(z)
    torch.testing.assert_close(tx.grad(loss)(z), g)
    torch.testing.assert_close(tx.jit(tx.grad(loss))(z), g)
    t = _z(4, 3, seed=2)
    torch.testing.assert_close(tx.jvp(loss, (z,), (t,)), tf.jvp(loss, (z,), (t,)))


def test_complex_means_of_var_mean_and_std_mean_stay_complex():
    z = _z(4, 3)
    for fn in (torch.var_mean, torch.std_mean):
        got, want = tx.jit(lambda w: fn(w, 0))(z), fn(z, 0)
        assert got[1].dtype == want[1].dtype == torch.complex128
        torch.testing.assert_close(got, want)


OTHER = {  # raised on complex tensors (or, for the aliases, under vmap) before
    "logaddexp": lambda z: torch.logaddexp(z, z.flip(0) * 0.5),
    "normalize": lambda z: torch.nn.functional.normalize(z, dim=1),
    "l1_loss": lambda z: torch.nn.functional.l1_loss(z, z.flip(1)),
    "linalg_matmul": lambda z: torch.linalg.matmul(z, z.mT),
    "chain_matmul": lambda z: torch.chain_matmul(z, z.mH, z),
}


@pytest.mark.parametrize("name", sorted(OTHER))
def test_more_complex_functions_match_torch(name):
    f, z = OTHER[name], _z(4, 3)
    want = f(z)
    zs = torch.stack([z, _z(4, 3, seed=1)])
    for got in (tx.jit(f)(z), tx.vmap(f)(zs)[0]):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(tx.vmap(f)(zs), torch.stack([f(w) for w in zs]))

    def loss(w):
        return f(w).abs().sum()

    torch.testing.assert_close(tx.grad(loss)(z), tf.grad(loss)(z))
    torch.testing.assert_close(tx.jit(tx.grad(loss))(z), tf.grad(loss)(z))
