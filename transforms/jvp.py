"""Forward mode: the JVP trace carries (primal, tangent) pairs through each primitive's jvp rule."""

from __future__ import annotations

import threading

import torch

from thunderx.ad_util import Zero, tangent_aval
from thunderx.avals import ShapedArray, is_float
from thunderx.core import (
    Trace,
    Tracer,
    abstract_eval,
    forward_jvp_rules,
    get_aval,
    jvp_rules,
    missing_rule,
    set_trace,
)


class _Mode(threading.local):
    # While a jvp rule runs: whether its level serves reverse mode (a rule differentiating a
    # sub-jaxpr, as jit_call's and the control-flow primitives' do, gives the inner level the same)
    reverse = False


_mode = _Mode()


def jvp_reverse() -> bool:
    """Whether the jvp rule now running belongs to a reverse-mode level (see JVPTrace)."""
    return _mode.reverse


class JVPTracer(Tracer):
    __slots__ = ()

    def __init__(self, trace, primal, tangent):
        self._trace = trace
        self.primal = primal
        self.tangent = tangent
        # the `_var` slot (unused by this tracer type) caches the primal's aval
        self._var = None

    @property
    def aval(self) -> ShapedArray:
        a = self._var
        if a is None:
            a = self._var = get_aval(self.primal)
        return a

    def to_concrete(self):
        p = self.primal
        return p.to_concrete() if isinstance(p, Tracer) else p


def _no_entries(t) -> bool:
    """Whether tangent `t` has no entries: it equals the zero tangent of its shape, so a rule
    sees the symbolic zero. A value computed only from such tangents (a reduction over an empty
    dimension) is then exactly 0, the empty sum, instead of the chain rule's `0 * nan` where
    the primal is nan (`acos(var(x))` over no elements; torch.func's batched rules give 0)."""
    if type(t) is torch.Tensor:
        return 0 in t.shape
    aval = getattr(t, "aval", None)
    return aval is not None and 0 in aval.shape


class JVPTrace(Trace):
    """`reverse`: this level serves reverse mode (grad, vjp, jacrev), where torch's `no_grad`
    blocks stop derivatives; forward mode (jvp, jacfwd, linearize) ignores them, as torch's
    forward AD does."""

    __slots__ = ("reverse", "writes_back_inputs")

    def __init__(self, parent, reverse: bool = False, writes_back_inputs: bool = False):
        super().__init__(parent)
        self.reverse = reverse
        # the `jvp` API's level: an in-place update of an input is written back to the caller's
        # primal and tangent when it ends (torch.func's semantics; thunderx/transforms/input_updates)
        self.writes_back_inputs = writes_back_inputs

    @property
    def reverse_mode(self) -> bool:
        return self.reverse

    def pair(self, x):
        if type(x) is JVPTracer and x._trace is self:
            t = x.tangent
            return x.primal, (None if type(t) is Zero else t)
        if isinstance(x, Tracer):
            self.check_foreign(x)
        return x, None

    def process_primitive(self, prim, args, params):
        if self.reverse and not torch.is_grad_enabled():
            return self._no_grad(prim, args, params)
        primals, tangents = [], []
        nonzero = ours = False
        for a in args:
            ours = ours or (type(a) is JVPTracer and a._trace is self)
            p, t = self.pair(a)
            primals.append(p)
            if t is None or _no_entries(t):
                tangents.append(Zero(get_aval(p)))
            else:
                tangents.append(t)
                nonzero = True
        with set_trace(self.parent):
            if not nonzero:
                out = prim.bind(*primals, **params)
                if not ours:  # a value the function made without its inputs stays concrete
                    return out
                t_out = [None] * len(out) if prim.multiple_results else None
            else:
                rule = None if self.reverse else forward_jvp_rules.get(prim)
                if rule is None:
                    rule = jvp_rules.get(prim)
                if rule is None:
                    return self.no_rule(prim, primals, params)
                prev, _mode.reverse = _mode.reverse, self.reverse
                try:
                    out, t_out = rule(primals, tangents, **params)
                finally:
                    _mode.reverse = prev
        if prim.multiple_results:
            return [self.wrap(o, t) for o, t in zip(out, t_out)]
        return self.wrap(out, t_out)

    def _no_grad(self, prim, args, params):
        """A `torch.no_grad()` block at a reverse-mode level: the values only, as torch's
        autograd records nothing there (no tangent, so no residual the derivative keeps)."""
        primals = [self.pair(a)[0] for a in args]
        with set_trace(self.parent):
            out = prim.bind(*primals, **params)
        if not any(type(a) is JVPTracer and a._trace is self for a in args):
            return out
        if prim.multiple_results:
            return [self.wrap(o, None) for o in out]
        return self.wrap(out, None)

    def no_rule(self, prim, primals, params):
        # Integer and bool outputs carry no tangent, so such primitives need no jvp rule.
        out_avals = abstract_eval(prim, [get_aval(p) for p in primals], params)
        avals = out_avals if prim.multiple_results else [out_avals]
        if any(is_float(a.dtype) for a in avals):
            raise missing_rule(prim, "jvp (differentiation)", params)
        return prim.bind(*primals, **params)

    def lift(self, value):
        return JVPTracer(self, value, Zero(get_aval(value)))

    lift_created = lift

    def wrap(self, out, t):
        """A value computed from this level's tracers stays a tracer even where its derivative
        is zero (sign(x), floor(x), x.detach()), as torch.func's wrappers do: a later in-place
        write of a differentiated value into it (`y = x.sign(); y[i] = v`) must be recorded.
        Integer and bool values, which carry no tangent, are returned as they are."""
        if type(t) is Zero or t is None:
            if tangent_aval(get_aval(out)) is None:
                return out
            return JVPTracer(self, out, Zero(get_aval(out)))
        return JVPTracer(self, out, t)


def jvp_flat(
    flat_fun,
    primals,
    tangents,
    reverse: bool = False,
    write_back: bool = False,
    deferred: list | None = None,
):
    """Run `flat_fun(*args) -> out_leaves` on JVP tracers. Returns (primal_outs, tangent_outs),
    tangents as symbolic `Zero`s where the output does not depend on the inputs. `reverse`: the
    level serves reverse mode (see `JVPTrace`).

    The function runs with grad mode on (a transform ignores a `no_grad` block around it, as
    torch.func's do); called inside such a block, its primal outputs carry no derivative for the
    enclosing reverse-mode levels (tangent outputs: see `no_grad_outputs`' callers).
    `write_back`: in-place updates of the inputs reach the caller's primals and tangents.
    `deferred`: a list that collects `(updates, primals)` instead, for the caller to write
    later (jacfwd, whose linear map still reads the inputs' values before the update)."""
    from thunderx.core import new_trace
    from thunderx.transforms.input_updates import mutated_inputs, write_back_jvp

    outer_grad_mode = torch.is_grad_enabled()
    with new_trace(JVPTrace, reverse, write_back or deferred is not None) as trace:
        ins = [
            JVPTracer(trace, p, t) if t is not None and tangent_aval(get_aval(p)) is not None else p
            for p, t in zip(primals, tangents)
        ]
        trace.input_ids.update(id(t) for t in ins)
        # the inputs this level wrapped (an operand without a tangent passes as it is, which may
        # be a tracer of an enclosing level: not an input here)
        before = [
            (t.primal, t.tangent) if isinstance(t, JVPTracer) and t._trace is trace else None
            for t in ins
        ]
        with torch.enable_grad():  # only no_grad blocks inside the function stop tangents
            outs = flat_fun(*ins)
        primal_outs, tangent_outs = [], []
        for o in outs:
            p, t = trace.pair(o)
            primal_outs.append(p)
            tangent_outs.append(Zero(get_aval(p).strip_weak()) if t is None else t)
        mutated = mutated_inputs(trace, ins, before, lambda t: (t.primal, t.tangent))
    if mutated and deferred is not None:
        deferred.append((mutated, list(primals)))
    elif mutated:
        write_back_jvp(mutated, list(primals), list(tangents))
    if not outer_grad_mode:
        primal_outs = no_grad_outputs(primal_outs)
    return primal_outs, tangent_outs


def no_grad_outputs(outs):
    """What a transform returns inside a `no_grad` block: no derivative for the enclosing
    reverse-mode levels (the `no_grad` primitive), and detached concrete tensors."""
    from thunderx import tree
    from thunderx.primitives.higher_order import no_grad_p

    def stop(v):
        if isinstance(v, Tracer):
            return no_grad_p.bind(v)
        if isinstance(v, torch.Tensor) and v.requires_grad:
            return v.detach()
        return v

    return tree.map(stop, outs)
