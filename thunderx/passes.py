"""Jaxpr passes: inlining of call primitives, dead-code elimination, common-subexpression
elimination (commutative operands in either order), NaN-safe simplification (`x * 0` is not
folded: NaN * 0 is NaN), and the rewrites in `thunderx.rewrites` (constant folding, transposes
absorbed into contractions)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from thunderx.core import Primitive, call_primitives, effectful_primitives
from thunderx.ir import Eqn, Jaxpr, Literal, Var, closure_convert
from thunderx.primitives import binary as B
from thunderx.primitives import creation as C
from thunderx.primitives import shape as S
from thunderx.primitives import unary as U

__all__ = [
    "call_primitives",
    "closure_convert",
    "cse",
    "dce",
    "has_effects",
    "inline_calls",
    "optimize",
    "simplify",
]


def is_view_primitive(prim: Primitive) -> bool:
    """Whether `prim`'s output is a view of its first operand (and of nothing else): the one
    place executors and passes ask (buffer reuse, fusion regions, constant folding), answered by
    the primitive's declared properties (tests/test_properties.py proves them against the
    implementation). Calls and control flow, whose outputs may be any operand, are not views."""
    return prim.props.aliases == (0,)


def has_effects(prim: Primitive) -> bool:
    """A primitive with effects (a random draw, a debug callback) is never removed, merged or
    folded; one whose properties were never declared is assumed to have some."""
    return prim in effectful_primitives or bool(prim.props.effects)


def is_commutative(prim: Primitive) -> bool:
    """`prim(x, y) == prim(y, x)` exactly, for every input (NaN and signed zeros included)."""
    from thunderx.primitives import binary as B

    return prim in (B.add_p, B.mul_p, B.eq_p, B.ne_p, B.and_p, B.or_p)


def inline_calls(jaxpr: Jaxpr, prims=None, keep: Callable | None = None) -> Jaxpr:
    """Replace each call equation by the equations of its sub-jaxpr (recursively), except those
    `keep(eqn)` names."""
    prims = call_primitives if prims is None else prims
    if not any(e.prim in prims for e in jaxpr.eqns):
        return jaxpr
    keep = keep or (lambda e: False)
    eqns: list[Eqn] = []
    subst: dict[int, object] = {}
    # the variables made for a nested call's outputs, held until the end: `subst` is keyed by
    # id, and a freed variable's id would be handed to a later one, which would then read the
    # freed one's substitution
    made: list[Var] = []

    def get(x):
        return subst.get(id(x), x) if isinstance(x, Var) else x

    def emit(sub: Jaxpr, inputs, outputs):
        local: dict[int, object] = {id(v): x for v, x in zip(sub.invars, inputs)}

        def read(x):
            if not isinstance(x, Var):
                return x
            y = local.get(id(x), x)  # a nested call's output: what its inlining substituted
            return subst.get(id(y), y) if isinstance(y, Var) else y

        for e in sub.eqns:
            ins = [read(x) for x in e.inputs]
            if e.prim in prims and not keep(e):
                outs = [Var(v.aval) for v in e.outputs]
                made.extend(outs)
                emit(e.params["jaxpr"], ins, outs)
            else:
                outs = [Var(v.aval) for v in e.outputs]
                eqns.append(Eqn(e.prim, ins, outs, e.params))
            for v, o in zip(e.outputs, outs):
                local[id(v)] = o
        for v, x in zip(outputs, sub.outvars):
            subst[id(v)] = read(x)

    for e in jaxpr.eqns:
        ins = [get(x) for x in e.inputs]
        if e.prim in prims and not keep(e):
            emit(e.params["jaxpr"], ins, e.outputs)
        else:
            eqns.append(Eqn(e.prim, ins, e.outputs, e.params) if ins != e.inputs else e)
    outvars = [get(x) for x in jaxpr.outvars]
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, outvars, check=False)


def dce(jaxpr: Jaxpr, used_outputs: list[bool] | None = None) -> Jaxpr:
    """Drop equations whose outputs nobody reads (and, with `used_outputs`, unused outvars)."""
    outvars = jaxpr.outvars
    if used_outputs is not None:
        outvars = [v for v, u in zip(outvars, used_outputs) if u]
    live = {id(v) for v in outvars if isinstance(v, Var)}
    kept = []
    for e in reversed(jaxpr.eqns):
        if has_effects(e.prim) or any(id(v) in live for v in e.outputs):
            kept.append(e)
            for x in e.inputs:
                if isinstance(x, Var):
                    live.add(id(x))
    if len(kept) == len(jaxpr.eqns) and used_outputs is None:
        return jaxpr
    kept.reverse()
    return Jaxpr(jaxpr.constvars, jaxpr.invars, kept, outvars, check=False)


def _param_key(params: dict):
    items = []
    for k, v in sorted(params.items()):
        try:
            hash(v)
        except TypeError:
            return None
        items.append((k, v))
    return tuple(items)


def cse(jaxpr: Jaxpr) -> Jaxpr:
    """Merge equations with the same primitive, inputs and params; the operands of a
    commutative primitive match in either order (`mul h k` and `mul k h`)."""
    from thunderx.primitives.higher_order import copy_p

    seen: dict = {}
    subst: dict[int, Var] = {}
    eqns = []
    changed = False

    def get(x):
        return subst.get(id(x), x) if isinstance(x, Var) else x

    def atom_key(x):
        return ("lit", type(x.val), x.val) if isinstance(x, Literal) else id(x)

    for e in jaxpr.eqns:
        ins = [get(x) for x in e.inputs]
        # two copies are two tensors (simplify removes every copy that is not an output)
        fresh = e.prim is copy_p
        pkey = None if has_effects(e.prim) or fresh else _param_key(e.params)
        if pkey is not None:
            akeys = tuple(atom_key(x) for x in ins)
            if len(akeys) == 2 and is_commutative(e.prim):
                akeys = tuple(sorted(akeys, key=repr))
            key = (e.prim, akeys, pkey)
            prev = seen.get(key)
            if prev is not None:
                for v, p in zip(e.outputs, prev):
                    subst[id(v)] = p
                changed = True
                continue
            seen[key] = e.outputs
        if ins != e.inputs:
            changed = True
            e = Eqn(e.prim, ins, e.outputs, e.params)
        eqns.append(e)
    if not changed:
        return jaxpr
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, [get(x) for x in jaxpr.outvars], check=False)


def _no_sign(z) -> bool:
    """A literal zero that is not -0.0 (an integer zero, or +0.0)."""
    return not (isinstance(z.val, float) and math.copysign(1.0, z.val) < 0)


def _adds_nothing(z, x) -> bool:
    # for a literal zero z: x + 0 is x but where x is -0.0 (the sum is +0.0, torch's answer
    # too), so only x + (-0.0) and integer sums vanish
    return not (x.aval.dtype.is_floating_point or x.aval.dtype.is_complex) or not _no_sign(z)


def _input_ids(jaxpr: Jaxpr) -> set:
    return {id(v) for v in (*jaxpr.constvars, *jaxpr.invars)}


def simplify(jaxpr: Jaxpr) -> Jaxpr:
    """NaN- and sign-safe algebra: `x + (-0.0)`, `x - 0.0` (and integer `x + 0`), `x * 1`,
    `x / 1`, `neg(neg(x))` and no-op converts vanish (`x + 0.0` stays: -0.0 + 0.0 is +0.0;
    stop_gradient stays: torch autograd through a jitted call must not see past it); `x + x`
    becomes `x * 2` (exact, inf and NaN included); `x * 0` stays (NaN and inf times 0 are NaN).
    Chains of layout ops are composed, and a reshape to its operand's own shape vanishes."""
    from thunderx.primitives.higher_order import copy_p

    bool_ = torch.bool
    returned = {id(v) for v in jaxpr.outvars if isinstance(v, Var)}
    inputs = _input_ids(jaxpr)
    subst: dict[int, object] = {}
    producers: dict[int, Eqn] = {}
    eqns = []
    changed = False

    def get(x):
        return subst.get(id(x), x) if isinstance(x, Var) else x

    def lit(x, value):
        return isinstance(x, Literal) and type(x.val) is not bool and x.val == value

    for e in jaxpr.eqns:
        ins = [get(x) for x in e.inputs]
        out = e.outputs[0] if len(e.outputs) == 1 else None
        repl = None
        if out is not None and e.prim in (B.add_p, B.sub_p, B.mul_p, B.div_p):
            x, y = ins
            if e.prim is B.add_p and lit(y, 0) and isinstance(x, Var) and _adds_nothing(y, x):
                repl = x
            elif e.prim is B.add_p and lit(x, 0) and isinstance(y, Var) and _adds_nothing(x, y):
                repl = y
            elif e.prim is B.sub_p and lit(y, 0) and _no_sign(y) and isinstance(x, Var):
                repl = x
            elif e.prim is B.mul_p and lit(y, 1) and isinstance(x, Var):
                repl = x
            elif e.prim is B.mul_p and lit(x, 1) and isinstance(y, Var):
                repl = y
            elif e.prim is B.div_p and lit(y, 1) and isinstance(x, Var):
                repl = x
            elif e.prim is B.div_p and _one_over(x, y, out, producers):
                # IEEE division 1/y is correctly rounded, as is reciprocal: the same bits, and no
                # tensor of ones built on every call
                e = Eqn(U.reciprocal_p, [y], e.outputs, {})
                ins, changed = e.inputs, True
            elif (
                e.prim is B.add_p
                and x is y
                and isinstance(x, Var)
                and x.aval.dtype != bool_
                and not x.aval.weak_type
            ):
                two = 2.0 if x.aval.dtype.is_floating_point or x.aval.dtype.is_complex else 2
                e = Eqn(B.mul_p, [x, Literal(two)], e.outputs, e.params)
                ins, changed = e.inputs, True
        elif out is not None and e.prim is U.neg_p:
            prev = producers.get(id(ins[0]))
            if prev is not None and prev.prim is U.neg_p:
                repl = prev.inputs[0]
        elif out is not None and e.prim is copy_p:
            # a copy matters only where it returns an input (or a constant) as an output
            if not (id(out) in returned and isinstance(ins[0], Var) and id(ins[0]) in inputs):
                repl = ins[0]
        elif out is not None and e.prim is U.convert_p:
            if ins[0].aval.dtype == e.params["new_dtype"] and isinstance(ins[0], Var):
                repl = ins[0]
        folded = _fold_layout(e, ins, producers) if out is not None and repl is None else None
        if folded is not None:
            e, ins, changed = folded, folded.inputs, True
        if repl is None and _identity_reshape(e, ins):
            # a reshape to its operand's shape (or a transpose undone by another, folded above)
            repl = ins[0]
        if (
            repl is not None
            and repl.aval.shape == out.aval.shape
            and (repl.aval.dtype == out.aval.dtype)
        ):
            subst[id(out)] = repl
            changed = True
            continue
        if ins != e.inputs:
            e = Eqn(e.prim, ins, e.outputs, e.params)
            changed = True
        for v in e.outputs:
            producers[id(v)] = e
        eqns.append(e)
    if not changed:
        return jaxpr
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, [get(x) for x in jaxpr.outvars], check=False)


def _identity_reshape(e: Eqn, ins) -> bool:
    x = ins[0] if e.prim is S.reshape_p else None
    return isinstance(x, Var) and x.aval.shape == e.outputs[0].aval.shape == tuple(
        e.params["new_sizes"]
    )


def _one_over(x, y, out, producers) -> bool:
    """`x / y` with x a tensor of ones of the output's shape and a real floating dtype."""
    prev = producers.get(id(x)) if isinstance(x, Var) else None
    return (
        prev is not None
        and prev.prim is C.full_p
        and prev.params["fill_value"] == 1
        and isinstance(y, Var)
        and y.aval.shape == out.aval.shape
        and y.aval.dtype == out.aval.dtype == x.aval.dtype
        and out.aval.dtype.is_floating_point
    )


def _fold_layout(e, ins, producers):
    """Compose chains of layout ops into one: broadcast∘broadcast, broadcast∘full -> full,
    reshape∘reshape, transpose∘transpose. Exact (no arithmetic), so always NaN-safe."""
    x = ins[0] if ins else None
    prev = producers.get(id(x)) if isinstance(x, Var) else None
    if prev is None:
        return None
    prim, pprim = e.prim, prev.prim
    if prim is S.broadcast_in_dim_p and pprim is S.broadcast_in_dim_p:
        d2 = e.params["broadcast_dimensions"]
        dims = tuple(d2[d] for d in prev.params["broadcast_dimensions"])
        params = {"shape": e.params["shape"], "broadcast_dimensions": dims}
        return Eqn(e.prim, [prev.inputs[0]], e.outputs, params)
    if prim is S.broadcast_in_dim_p and pprim is C.full_p:
        params = dict(prev.params, shape=e.params["shape"])
        return Eqn(C.full_p, [], e.outputs, params)
    if prim is S.reshape_p and pprim is S.reshape_p:
        return Eqn(e.prim, [prev.inputs[0]], e.outputs, e.params)
    if prim is S.transpose_p and pprim is S.transpose_p:
        p1, p2 = prev.params["permutation"], e.params["permutation"]
        perm = tuple(p1[i] for i in p2)
        if perm == tuple(range(len(perm))):
            return Eqn(
                S.reshape_p, [prev.inputs[0]], e.outputs, {"new_sizes": e.outputs[0].aval.shape}
            )
        return Eqn(e.prim, [prev.inputs[0]], e.outputs, {"permutation": perm})
    return None


def optimize(jaxpr: Jaxpr, keep_custom_rules: bool = False) -> Jaxpr:
    """The pass pipeline jit runs before lowering; every step is exact (NaN-safe).
    `keep_custom_rules`: custom_jvp / custom_vjp calls stay calls (for the program torch
    autograd runs through, whose derivative of such a call is its rule)."""
    from thunderx.rewrites import (
        absorb_transposes,
        batch_horizontal,
        fold_constants,
        merge_slice_transposes,
    )

    inputs = _input_ids(jaxpr)
    computed = [not (isinstance(v, Var) and id(v) in inputs) for v in jaxpr.outvars]
    from thunderx.primitives.custom import has_rule, keeps_derivative
    from thunderx.primitives.custom_vmap import custom_vmap_call_p

    # a write torch autograd must not see stays one call (torch_codegen: keep_derivative_call)
    keep = (lambda e: keeps_derivative(e) or has_rule(e)) if keep_custom_rules else keeps_derivative
    # a batching rule has nothing left to batch in the program jit runs: its function inlined
    prims = call_primitives | {custom_vmap_call_p}
    jaxpr = fold_constants(simplify(inline_calls(jaxpr, prims=prims, keep=keep)))
    jaxpr = batch_horizontal(cse(merge_slice_transposes(absorb_transposes(jaxpr))))
    # CSE can make `add l m` an `add l l`; simplify then doubles it
    return _fresh_outputs(dce(simplify(jaxpr)), computed)


def _fresh_outputs(jaxpr: Jaxpr, computed: list) -> Jaxpr:
    """A computed output the passes made an input (`x * 1`, `x / 1`, `neg(neg(x))`) copied, so
    that the caller gets a fresh tensor as from torch, not its own argument back."""
    from thunderx.primitives.higher_order import copy_p

    inputs = _input_ids(jaxpr)
    eqns, outvars = list(jaxpr.eqns), list(jaxpr.outvars)
    for i, (v, fresh) in enumerate(zip(outvars, computed)):
        if fresh and isinstance(v, Var) and id(v) in inputs:
            out = Var(v.aval.strip_weak())
            eqns.append(Eqn(copy_p, [v], [out], {}))
            outvars[i] = out
    if outvars == list(jaxpr.outvars):
        return jaxpr
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, outvars)
