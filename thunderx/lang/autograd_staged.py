"""`torch.autograd.grad` and `Tensor.requires_grad_()` on values traced by `jit` (or
`make_jaxpr`): reverse mode over the staged record, as torch's autograd runs over its graph.

torch code that differentiates inside the function being compiled (a physics-informed loss:
`x.requires_grad_()`, `u = model(x)`, `u_x = torch.autograd.grad(u, x, torch.ones_like(u),
create_graph=True)[0]`, then a loss of `u_x`) needs a record of what was computed between the
inputs and the outputs. Under `jit` that record exists: the staging trace's equations. So:

- `x.requires_grad_()` marks x's variable in the trace (torch's leaf that requires grad); a value
  requires grad when it is computed from a marked one, or from a captured tensor that requires
  grad (a module's parameter), through equations other than `detach` / `no_grad`;
- `torch.autograd.grad(outputs, inputs, grad_outputs)` takes the equations that lie on a path
  from an input to an output (the slice: a small jaxpr whose other operands are the trace's own
  values), and runs thunderx's `vjp` of that jaxpr at the inputs. Its equations are recorded in
  the same trace, so with `create_graph=True` the gradients can be differentiated again (a
  second `torch.autograd.grad`, or any thunderx transform around the `jit`); without it they
  are detached, as torch's are. The forward equations the vjp recomputes are the trace's own
  again, which the optimizer's CSE merges.

torch's errors are kept: an input that does not require grad, an output that does not, an input
no output depends on (unless `allow_unused`), a non-scalar output without `grad_outputs`. A
slice through an equation with effects (a random draw, an opaque torch call) that depends on an
input is refused: replaying it would draw again or call again."""

from __future__ import annotations

import torch

from thunderx.core import Tracer, current_trace
from thunderx.errors import user_frame

_STOPS: tuple = ()


def _stops():
    global _STOPS
    if not _STOPS:
        from thunderx.primitives.higher_order import no_grad_p, stop_gradient_p

        _STOPS = (stop_gradient_p, no_grad_p)
    return _STOPS


def _is_staged(x) -> bool:
    from thunderx.tracing import StagingTrace, StagingTracer

    return type(x) is StagingTracer and isinstance(x._trace, StagingTrace) and x._trace.alive


def mark(x) -> bool:
    """`x.requires_grad_()` on a staged value: mark it; False for any other value."""
    if not _is_staged(x):
        return False
    x._trace.grad_vars.add(id(x._var))
    return True


def _reach(trace, sources: set) -> set:
    """Ids of the variables computed from `sources` (variable ids) through equations that pass
    gradients."""
    stops = _stops()
    reach = set(sources)
    for e in trace.eqns:
        if e.prim in stops:
            continue
        if any(id(v) in reach for v in e.inputs):
            reach.update(id(o) for o in e.outputs)
    return reach


def _grad_sources(trace) -> set:
    """Marked variables and the constvars of captured tensors that require grad."""
    trace.grad_read = True  # the answer depends on which arguments require grad
    srcs = set(trace.grad_vars)
    for v, c in zip(trace.constvars, trace.consts):
        if isinstance(c, torch.Tensor) and not isinstance(c, Tracer) and c.requires_grad:
            srcs.add(id(v))
    return srcs


def requires_grad(x) -> bool | None:
    """The `requires_grad` of a staged value; None for any other value."""
    if not _is_staged(x):
        return None
    return id(x._var) in _reach(x._trace, _grad_sources(x._trace))


def staged_grad(trace, outs, ins, cts, kw):
    """torch.autograd.grad over `trace`'s record (see the module docstring)."""
    from thunderx.ir import Jaxpr, Literal, eval_jaxpr
    from thunderx.transforms import ad

    if current_trace() is not trace:
        raise NotImplementedError(
            f"torch.autograd.grad at {user_frame()}: on values of a jit that encloses the "
            "current transform; call it outside the inner transform, or use thunderx.vjp"
        )
    if not all(isinstance(o, Tracer) for o in outs):
        raise NotImplementedError(
            f"torch.autograd.grad at {user_frame()}: outputs computed outside the jit (values "
            "with torch's own graph) differentiated inside it; jit records only what it traced: "
            "compute the outputs inside the function, or call torch.autograd.grad outside it"
        )
    for v in outs + ins + tuple(c for c in cts if c is not None):
        if isinstance(v, Tracer) and getattr(v, "_trace", None) is not trace:
            raise NotImplementedError(
                f"torch.autograd.grad at {user_frame()}: a value of another transform among its "
                "arguments; differentiate with thunderx.vjp instead"
            )
    in_vars = [trace.atom(x) for x in ins]
    out_vars = [trace.atom(o) for o in outs]
    live = _reach(trace, _grad_sources(trace))  # the variables that require grad
    for i, v in enumerate(in_vars):
        if isinstance(v, Literal) or id(v) not in live:
            raise RuntimeError(
                f"One of the differentiated Tensors does not require grad (input {i} of "
                f"torch.autograd.grad at {user_frame()}): call .requires_grad_() on it first"
            )
    for i, v in enumerate(out_vars):
        if isinstance(v, Literal) or id(v) not in live:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn "
                f"(torch.autograd.grad at {user_frame()})"
            )
    cts = list(cts)
    for i, (o, c) in enumerate(zip(outs, cts)):
        if c is None:
            if o.aval.ndim != 0:
                raise RuntimeError(
                    f"grad can be implicitly created only for scalar outputs (output {i} of "
                    f"torch.autograd.grad at {user_frame()} is {o.aval.str_short()})"
                )
            cts[i] = torch.ones_like(o)

    uniq = list({id(v): v for v in in_vars}.values())
    eqns = _slice(trace, uniq, out_vars)
    made = {id(o) for e in eqns for o in e.outputs} | {id(v) for v in uniq}
    free = {}
    for e in eqns:
        for a in e.inputs:
            if not isinstance(a, Literal) and id(a) not in made:
                free.setdefault(id(a), a)
    for v in out_vars:  # an output that is an input, or not computed from any input
        if id(v) not in made:
            free.setdefault(id(v), v)
    jaxpr = Jaxpr(list(free.values()), uniq, eqns, out_vars)
    consts = _tracers(trace, free.values())
    _, vjp_fn = ad.vjp(lambda *xs: eval_jaxpr(jaxpr, consts, *xs), *_tracers(trace, uniq))
    by_var = dict(zip((id(v) for v in uniq), vjp_fn(cts)))
    # an input some output depends on: an output itself, or read by an equation of the slice
    # (each is on a path to an output)
    used = {id(v) for v in out_vars} | {id(a) for e in eqns for a in e.inputs}
    grads = []
    for i, v in enumerate(in_vars):
        if id(v) not in used:
            if not kw.get("allow_unused") and not kw.get("materialize_grads"):
                raise RuntimeError(
                    f"One of the differentiated Tensors appears to not have been used in the "
                    f"graph (input {i} of torch.autograd.grad at {user_frame()}). Set "
                    "allow_unused=True if this is the desired behavior."
                )
            grads.append(torch.zeros_like(ins[i]) if kw.get("materialize_grads") else None)
            continue
        g = by_var[id(v)]
        grads.append(g if kw.get("create_graph") else g.detach())
    return tuple(grads)


def _tracers(trace, vars_) -> list:
    """A tracer of `trace` for each of its variables."""
    from thunderx.tracing import StagingTracer

    return [StagingTracer(trace, v) for v in vars_]


def _slice(trace, in_vars, out_vars) -> list:
    """The equations on a path from an input to an output, in order; an effectful one there
    is refused."""
    fwd = _reach(trace, {id(v) for v in in_vars})
    needed = {id(v) for v in out_vars}
    keep = []
    stops = _stops()
    for e in reversed(trace.eqns):
        if not any(id(o) in needed for o in e.outputs):
            continue
        if e.prim in stops or not any(id(a) in fwd for a in e.inputs):
            continue  # a constant of the slice
        if e.prim.props.effects:
            raise NotImplementedError(
                f"torch.autograd.grad at {user_frame()}: the path from its inputs to its outputs "
                f"goes through {e.prim.name}, which has effects "
                f"({', '.join(sorted(e.prim.props.effects))}) and cannot be run again; use "
                "thunderx.grad / vjp around the computation instead"
            )
        keep.append(e)
        needed.update(id(a) for a in e.inputs if id(a) in fwd)
    return keep[::-1]
