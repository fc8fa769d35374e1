"""Device placement without a GPU: functions traced on `meta` tensors (which carry a device but
no data) must keep every non-scalar intermediate on that device, as their CUDA programs must
keep everything on the GPU. A decomposition that makes its constants (an iota, a mask, a fill)
on the CPU shows here as a CPU value in the jaxpr; on CUDA it fails at run time with 'Expected
all tensors to be on the same device'."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import thunderx as tx
from thunderx import lax

META = torch.device("meta")


def off_device(closed, device=META) -> list[str]:
    """Names of the primitives whose non-scalar outputs are not on `device`, sub-jaxprs
    (control flow bodies, custom rules) included."""
    bad = []

    def walk(j):
        for e in j.eqns:
            bad.extend(e.prim.name for v in e.outputs if v.aval.device != device and v.aval.shape)
            for p in e.params.values():
                for q in p if isinstance(p, (list, tuple)) else (p,):
                    sub = getattr(q, "jaxpr", q)
                    if hasattr(sub, "eqns"):
                        walk(sub)

    walk(closed.jaxpr)
    return sorted(set(bad))


def _float_sum(out):
    leaves = [o for o in tx.tree.leaves(out) if hasattr(o, "dtype") and o.dtype.is_floating_point]
    return sum(o.sum() for o in leaves) if leaves else None


def test_op_db_forward_gradient_and_batched_programs_stay_on_the_device():
    from thunderx.testing import opinfo
    from thunderx.testing.opdb import differentiable_ops

    warnings.filterwarnings("ignore")
    traced, leaks = 0, []
    for op in differentiable_ops():
        try:
            samples = list(op.sample_inputs("meta", torch.float32, requires_grad=False))[:2]
        except Exception:  # noqa: BLE001 - torch has no meta samples for this op
            continue
        for s in samples:
            opinfo.fn = op.op
            f, tensors = opinfo._split(s)
            try:
                f(*tensors)  # torch itself runs it on meta tensors
            except Exception:  # noqa: BLE001
                continue
            floats = tuple(i for i, t in enumerate(tensors) if t.dtype.is_floating_point)
            builds = [lambda: tx.make_jaxpr(f)(*tensors)]
            if floats:
                grad = tx.grad(lambda *ts: _float_sum(f(*ts)), floats)
                builds.append(lambda: tx.make_jaxpr(grad)(*tensors))
            if tensors:  # batched over a new leading axis of the first tensor
                axes = (0,) + (None,) * (len(tensors) - 1)
                first = tensors[0].expand(3, *tensors[0].shape)
                builds.append(lambda: tx.make_jaxpr(tx.vmap(f, axes))(first, *tensors[1:]))
            progs = []
            for build in builds:
                try:
                    progs.append(build())
                except Exception:  # noqa: BLE001 - not traceable for other reasons (op_db's report)
                    pass
            if not progs:
                continue
            traced += 1
            bad = [name for p in progs for name in off_device(p)]
            if bad:
                leaks.append((opinfo.op_id(op), bad))
            break
    assert traced >= 450, traced  # the sweep really traced op_db
    assert leaks == []


def test_control_flow_attention_and_batching_stay_on_the_device():
    x, w = torch.randn(5, 4, device=META), torch.randn(4, 4, device=META)
    # the loop counter is a CPU scalar: adding it to a device tensor moves it (device_put)
    loop = tx.make_jaxpr(lambda x: lax.fori_loop(0, 3, lambda i, c: torch.tanh(c @ w) + i, x))(x)
    assert off_device(loop) == []
    assert "device_put" in str(loop)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).to(META)
    params = {k: v.detach() for k, v in layer.named_parameters()}
    mask = torch.nn.Transformer.generate_square_subsequent_mask(10, device=META)

    def loss(p, x):
        kw = {"src_mask": mask, "is_causal": True}
        return tx.functional_call(layer, p, (x,), kw).square().mean()

    closed = tx.make_jaxpr(tx.grad(loss))(params, torch.randn(3, 10, 32, device=META))
    assert off_device(closed) == []
    y = torch.zeros(5, dtype=torch.long, device=META)
    per_ex = tx.vmap(tx.grad(lambda x, y: F.cross_entropy(x[None], y[None])))
    assert off_device(tx.make_jaxpr(per_ex)(x, y)) == []


def test_a_cpu_scalar_tensor_joins_a_device_tensor_and_other_mixes_fail():
    x = torch.randn(3, device=META)
    lr = torch.tensor(0.5)  # a CPU scalar, as torch allows beside CUDA tensors
    closed = tx.make_jaxpr(lambda x, lr: x * lr + lr)(x, lr)
    assert off_device(closed) == [] and closed.jaxpr.outvars[0].aval.device == META
    # on one device, nothing is moved
    assert "device_put" not in str(tx.make_jaxpr(lambda x, lr: x * lr)(torch.randn(3), lr))
    with pytest.raises(RuntimeError, match="same device.*cpu, meta"):
        tx.make_jaxpr(lambda a, b: a + b)(x, torch.randn(3))


def test_device_put_rules_against_torch():
    # on the CPU the move is the identity: its jvp, vjp and batching are checked for values
    x, s = torch.randn(4, dtype=torch.float64), torch.tensor(1.5, dtype=torch.float64)
    from thunderx.primitives.unary import device_put

    def f(x, s):
        return torch.sin(x) * device_put(s, torch.device("cpu"))

    def ref(x, s):
        return torch.sin(x) * s

    torch.testing.assert_close(tx.jit(f)(x, s), ref(x, s))
    torch.testing.assert_close(
        tx.grad(lambda x, s: f(x, s).sum(), (0, 1))(x, s),
        torch.func.grad(lambda x, s: ref(x, s).sum(), (0, 1))(x, s),
    )
    t = (torch.ones(4, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64))
    torch.testing.assert_close(tx.jvp(f, (x, s), t), torch.func.jvp(ref, (x, s), t))
    xs = torch.randn(3, 4, dtype=torch.float64)
    torch.testing.assert_close(tx.vmap(f, (0, None))(xs, s), torch.func.vmap(ref, (0, None))(xs, s))
