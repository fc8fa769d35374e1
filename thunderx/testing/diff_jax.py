"""JAX as a third oracle of the differential test (optional: `pip install 'thunderx[jax]'`).

The ops of `diff_ops` that have a direct jax.numpy counterpart are rewritten in JAX here; the
`jax(grad)` check compares thunderx's gradient with `jax.grad` in float64. JAX's conventions at
kinks and ties differ from torch's by design (torch.func is thunderx's reference there), so only
a disagreement at a differentiable point where finite differences side with JAX is a failure.
"""

from __future__ import annotations

import torch

try:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    AVAILABLE = True
except ImportError:  # the optional extra is not installed
    AVAILABLE = False


def _pos(x):
    return x * x + 0.1


def _unit(x):
    return 0.9 * jnp.tanh(x)


def _table() -> dict:
    if not AVAILABLE:
        return {}
    n = jax.nn
    lax = jax.lax
    t = {
        **{
            k: getattr(jnp, k)
            for k in ("abs sin cos tanh exp expm1 sinh cosh floor ceil trunc sign square".split())
        },
        "neg": jnp.negative,
        "atan": jnp.arctan,
        "asinh": jnp.arcsinh,
        "erf": jax.scipy.special.erf,
        "erfc": jax.scipy.special.erfc,
        "sigmoid": n.sigmoid,
        "relu": n.relu,
        "relu6": n.relu6,
        "silu": n.silu,
        "softplus": n.softplus,
        "logsigmoid": n.log_sigmoid,
        "gelu": lambda x: n.gelu(x, approximate=False),
        "elu": n.elu,
        "selu": n.selu,
        "celu": n.celu,
        "softsign": n.soft_sign,
        "hardtanh": lambda x: jnp.clip(x, -1.0, 1.0),
        "tan": lambda x: jnp.tan(_unit(x)),
        "log": lambda x: jnp.log(_pos(x)),
        "log1p": lambda x: jnp.log1p(_pos(x)),
        "log2": lambda x: jnp.log2(_pos(x)),
        "log10": lambda x: jnp.log10(_pos(x)),
        "sqrt": lambda x: jnp.sqrt(_pos(x)),
        "rsqrt": lambda x: lax.rsqrt(_pos(x)),
        "reciprocal": lambda x: 1.0 / _pos(x),
        "lgamma": lambda x: jax.scipy.special.gammaln(_pos(x)),
        "digamma": lambda x: jax.scipy.special.digamma(_pos(x)),
        "asin": lambda x: jnp.arcsin(_unit(x)),
        "acos": lambda x: jnp.arccos(_unit(x)),
        "atanh": lambda x: jnp.arctanh(_unit(x)),
        "erfinv": lambda x: jax.scipy.special.erfinv(_unit(x)),
        "pow_scalar": lambda x: x**3,
        "rpow": lambda x: 2.0**x,
        "add": jnp.add,
        "sub": jnp.subtract,
        "mul": jnp.multiply,
        "atan2": jnp.arctan2,
        "maximum": jnp.maximum,
        "minimum": jnp.minimum,
        "fmax": jnp.fmax,
        "fmin": jnp.fmin,
        "hypot": jnp.hypot,
        "logaddexp": jnp.logaddexp,
        "div": lambda x, y: x / (y * y + 0.5),
        "pow": lambda x, y: _pos(x) ** y,
        "xlogy": lambda x, y: jax.scipy.special.xlogy(x, _pos(y)),
        "where": lambda x, y: jnp.where(x > 0, x, y),
        "lerp": lambda x, y: x + 0.3 * (y - x),
        "addcmul": lambda x, y: x + 0.5 * y * y,
    }
    for name, fn in {
        "sum": jnp.sum,
        "mean": jnp.mean,
        "prod": jnp.prod,
        "amax": jnp.max,
        "amin": jnp.min,
        "logsumexp": jax.scipy.special.logsumexp,
    }.items():
        t[name] = (lambda f: lambda x, *, dim, keepdim: f(x, axis=dim, keepdims=keepdim))(fn)
    return t


JAX_FNS = _table()


def jax_grad(op: str, params: dict, xs: list, w: torch.Tensor) -> tuple:
    """jax.grad of sum(op(*xs) * w) with respect to every x, as float64 torch tensors."""
    fn = JAX_FNS[op]

    def s(*args):
        return jnp.sum(fn(*args, **params) * jnp.asarray(w.numpy()))

    grads = jax.grad(s, argnums=tuple(range(len(xs))))(*[jnp.asarray(x.numpy()) for x in xs])
    return tuple(torch.from_numpy(jax.device_get(g).copy()).to(torch.float64) for g in grads)
