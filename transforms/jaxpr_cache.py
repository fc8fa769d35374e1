"""Programs derived from a closure-converted jaxpr and cached on it: its compiled program per
executor, its jvp per pattern of nonzero tangents, its batched form per batch dims. The
higher-order primitives (jit_call, cond, scan, while, remat, custom rules) and jit share them."""

from __future__ import annotations

from thunderx.ad_util import Zero
from thunderx.ad_util import instantiate as _instantiate
from thunderx.core import Tracer
from thunderx.executors import get_executor
from thunderx.ir import Jaxpr, eval_jaxpr
from thunderx.passes import closure_convert, optimize
from thunderx.tracing import trace_flat


def compiled_for(jaxpr: Jaxpr, executor: str = "torch"):
    """The compiled program for a closure-converted jaxpr, cached on the jaxpr."""
    key = ("compiled", executor)
    prog = jaxpr._cache.get(key)
    if prog is None:
        prog = _compile(jaxpr, executor)
        jaxpr._cache[key] = prog
    return prog


def _compile(jaxpr: Jaxpr, executor: str):
    from thunderx.primitives.custom import holds_rules

    prog = get_executor(executor).lower(optimize(jaxpr))
    if holds_rules(jaxpr):
        # the variant torch autograd runs through calls custom rules (whose derivative there is
        # the rule, primitives/custom.py) where the others inline them
        from thunderx.executors.torch_codegen import plain_function

        kept = optimize(jaxpr, keep_custom_rules=True)
        prog.fn_plain, prog.source_plain = plain_function(kept)
        if len(kept.outvars) == 1:
            prog.fn_single_plain = plain_function(kept, single=True)[0]
    return prog


def jvp_of_jaxpr(jaxpr: Jaxpr, nonzero: tuple, instantiate: tuple | bool = False):
    """(jvp jaxpr, its consts, which tangent outputs are nonzero), cached per nonzero pattern.
    `instantiate` (per output, or for all) materializes symbolic-zero output tangents, so a loop
    carry or the branches of a cond agree on which tangents they produce."""
    from thunderx.transforms.jvp import jvp_flat, jvp_reverse

    reverse = jvp_reverse()  # the mode of the level differentiating the primitive holding it
    key = ("jvp", nonzero, instantiate, reverse)
    hit = jaxpr._cache.get(key)
    if hit is not None:
        return hit

    n = len(jaxpr.invars)
    meta = {}

    def fun(*args):
        ps, ts = args[:n], iter(args[n:])
        tangents = [next(ts) if nz else None for nz in nonzero]
        p_out, t_out = jvp_flat(lambda *xs: eval_jaxpr(jaxpr, [], *xs), ps, tangents, reverse)
        if instantiate:
            inst = instantiate if isinstance(instantiate, tuple) else (True,) * len(t_out)
            t_out = [_instantiate(t) if i else t for t, i in zip(t_out, inst)]
        meta["nz"] = tuple(type(t) is not Zero for t in t_out)
        return p_out + [t for t in t_out if type(t) is not Zero], None

    t_avals = [v.aval for v, nz in zip(jaxpr.invars, nonzero) if nz]
    closed, _ = trace_flat(fun, jaxpr.in_avals + t_avals)
    result = (closure_convert(closed.jaxpr), closed.consts, meta["nz"])
    if not any(isinstance(c, Tracer) for c in closed.consts):
        jaxpr._cache[key] = result
    return result


def batch_of_jaxpr(jaxpr: Jaxpr, dims: tuple, size: int, force_out=None):
    """(batched jaxpr over batched operands, consts, out batch dims), cached per dims and size.
    `force_out`: None, one dim for every output, or a tuple with a dim (or None) per output."""
    key = ("batch", dims, size, force_out)
    hit = jaxpr._cache.get(key)
    if hit is not None:
        return hit
    from thunderx.core import new_trace
    from thunderx.primitives import shape as S
    from thunderx.transforms.vmap import BatchTrace, BatchTracer

    meta = {}

    def fun(*args):
        with new_trace(BatchTrace, size) as trace:
            ins = [a if d is None else BatchTracer(trace, a, d) for a, d in zip(args, dims)]
            outs = eval_jaxpr(jaxpr, [], *ins)
            unpacked = [trace.unpack(o) for o in outs]
        results, out_dims = [], []
        forces = force_out if isinstance(force_out, tuple) else (force_out,) * len(unpacked)
        for (val, d), force in zip(unpacked, forces):
            if force is not None:
                val = (
                    S.broadcast_batch(val, size, force) if d is None else S.moveaxis(val, d, force)
                )
                d = force
            results.append(val)
            out_dims.append(d)
        meta["out_dims"] = tuple(out_dims)
        return results, None

    in_avals = []
    for v, d in zip(jaxpr.invars, dims):
        a = v.aval
        if d is not None:
            shape = list(a.shape)
            shape.insert(d, size)
            a = a.update(shape=tuple(shape))
        in_avals.append(a)
    closed, _ = trace_flat(fun, in_avals)
    result = (closure_convert(closed.jaxpr), closed.consts, meta["out_dims"])
    if not any(isinstance(c, Tracer) for c in closed.consts):
        jaxpr._cache[key] = result
    return result
