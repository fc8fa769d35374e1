"""Algebraic rewrites run by `passes.optimize`, each exact (NaN-safe: no rewrite changes a
result for any input, NaN and inf included):

- `fold_constants`: equations whose operands are all known at trace time (an input-free
  subgraph: `full`, arithmetic on it, layout ops of it) become one `full` each, and a constant
  operand of `add`/`sub`/`mul` becomes a literal, so nothing input-free runs per call.
- `absorb_transposes`: a `transpose` of a `dot_general` result, or of an operand, folds into the
  contraction's dimension numbers (the product is the same; only the layout differs).
- `merge_slice_transposes`: a sum of zero-pads whose pieces tile one axis (the backward of
  splitting a tensor into slices) becomes one `concatenate`.

>>> fold_constants(jaxpr)  # doctest: +SKIP
"""

from __future__ import annotations

import math

import torch

from thunderx.core import impl_rules
from thunderx.ir import Eqn, Jaxpr, Literal, Var

# Elementwise binary primitives where a rank-0 literal may replace a uniform tensor operand with
# the same result on every backend (div is left out: CUDA divides by a scalar operand through
# its reciprocal, which rounds differently).
_LITERAL_OPERAND: tuple = ()


def _literal_operand_prims():
    global _LITERAL_OPERAND
    if not _LITERAL_OPERAND:
        from thunderx.primitives import binary as B

        _LITERAL_OPERAND = (B.add_p, B.sub_p, B.mul_p)
    return _LITERAL_OPERAND


def _full_eqn(out: Var, value) -> Eqn:
    from thunderx.primitives.creation import full_p

    a = out.aval
    params = {"shape": tuple(a.shape), "fill_value": value, "dtype": a.dtype, "device": a.device}
    return Eqn(full_p, [], [out], params)


def _scalar(t: torch.Tensor):
    return t.reshape(()).item()


def fold_constants(jaxpr: Jaxpr, max_numel: int = 1) -> Jaxpr:
    """Evaluate input-free equations at trace time (results of at most `max_numel` elements, so
    folding never materializes a large tensor); every constant becomes a `full`, and `add`,
    `sub`, `mul` take a constant operand as a literal. Effectful equations are never folded."""
    from thunderx.passes import call_primitives, has_effects, is_view_primitive
    from thunderx.primitives.creation import full_p

    literal_ok = _literal_operand_prims()
    uniform: dict[int, object] = {}  # var -> the one value every element holds
    eqns, changed = [], False
    for e in jaxpr.eqns:
        out = e.outputs[0] if len(e.outputs) == 1 else None
        if e.prim is full_p:
            # the value the tensor holds: the fill rounded to its dtype (0.1 in float16 is not 0.1)
            fill = torch.tensor(e.params["fill_value"], dtype=e.params["dtype"])
            uniform[id(out)] = _scalar(fill)
            eqns.append(e)
            continue
        ins = list(e.inputs)
        known = [isinstance(x, Literal) or id(x) in uniform for x in ins]
        foldable = (
            out is not None
            and ins
            and all(known)
            and any(isinstance(x, Var) for x in ins)
            and not has_effects(e.prim)
            and e.prim not in call_primitives
            and e.prim in impl_rules
        )
        if foldable and is_view_primitive(e.prim) and out.aval.dtype == ins[0].aval.dtype:
            # a layout op of a constant is the constant, at any size
            uniform[id(out)] = uniform[id(ins[0])]
            eqns.append(_full_eqn(out, uniform[id(out)]))
            changed = True
            continue
        if foldable and math.prod(out.aval.shape) <= max_numel:
            args = [
                x.val
                if isinstance(x, Literal)
                else torch.full(x.aval.shape, uniform[id(x)], dtype=x.aval.dtype)
                for x in ins
            ]
            val = impl_rules[e.prim](*args, **e.params)
            if isinstance(val, torch.Tensor) and val.numel() == 1:
                val = _scalar(val.to(out.aval.dtype))
                uniform[id(out)] = val
                eqns.append(_full_eqn(out, val))
                changed = True
                continue
        if e.prim in literal_ok and out is not None and len(ins) == 2:
            for k in (0, 1):
                x, other = ins[k], ins[1 - k]
                if (
                    isinstance(x, Var)
                    and id(x) in uniform
                    and isinstance(other, Var)
                    and other.aval.shape == out.aval.shape
                    and other.aval.dtype == x.aval.dtype == out.aval.dtype
                    and type(uniform[id(x)]) is not bool
                ):
                    ins[k] = Literal(uniform[id(x)])
                    break
            if ins != e.inputs:
                e = Eqn(e.prim, ins, e.outputs, e.params)
                changed = True
        eqns.append(e)
    if not changed:
        return jaxpr
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars, check=False)


def _free(n, contract, batch):
    return [i for i in range(n) if i not in contract and i not in batch]


def absorb_transposes(jaxpr: Jaxpr) -> Jaxpr:
    """`transpose(dot_general(x, y))` that only swaps the operands' free dimensions becomes
    `dot_general(y, x)`; `dot_general(transpose(a), y)` becomes `dot_general(a, y)` with the
    dimension numbers renamed, when the transpose keeps the free dimensions in order."""
    from thunderx.primitives.linalg import dot_general_p
    from thunderx.primitives.shape import transpose_p

    producer: dict[int, Eqn] = {}
    uses: dict[int, int] = {}
    for e in jaxpr.eqns:
        for x in e.inputs:
            if isinstance(x, Var):
                uses[id(x)] = uses.get(id(x), 0) + 1
    for x in jaxpr.outvars:
        if isinstance(x, Var):
            uses[id(x)] = uses.get(id(x), 0) + 1
    eqns, changed = [], False
    for e in jaxpr.eqns:
        if e.prim is dot_general_p:
            new = _absorb_operand_transposes(e, producer, transpose_p)
            if new is not None:
                e, changed = new, True
        elif e.prim is transpose_p and isinstance(e.inputs[0], Var):
            prev = producer.get(id(e.inputs[0]))
            if prev is not None and prev.prim is dot_general_p and uses[id(e.inputs[0])] == 1:
                new = _swap_operands(prev, e)
                if new is not None:
                    e, changed = new, True
        for v in e.outputs:
            producer[id(v)] = e
        eqns.append(e)
    if not changed:
        return jaxpr
    from thunderx.passes import dce

    return dce(Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars, check=False))


def _swap_operands(dot: Eqn, tr: Eqn):
    (lc, rc), (lb, rb) = dot.params["dimension_numbers"]
    x, y = dot.inputs
    nb = len(lb)
    nfx = len(_free(x.aval.ndim, lc, lb))
    nfy = len(_free(y.aval.ndim, rc, rb))
    swapped = tuple(range(nb)) + tuple(range(nb + nfx, nb + nfx + nfy)) + tuple(range(nb, nb + nfx))
    if tuple(tr.params["permutation"]) != swapped:
        return None
    return Eqn(dot.prim, [y, x], tr.outputs, {"dimension_numbers": ((rc, lc), (rb, lb))})


def _absorb_operand_transposes(e: Eqn, producer, transpose_p):
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    ins = list(e.inputs)
    dims = [[lc, lb], [rc, rb]]
    changed = False
    for k in (0, 1):
        x = ins[k]
        prev = producer.get(id(x)) if isinstance(x, Var) else None
        if prev is None or prev.prim is not transpose_p:
            continue
        perm = prev.params["permutation"]
        contract, batch = dims[k]
        mapped_free = [perm[d] for d in _free(x.aval.ndim, contract, batch)]
        if mapped_free != sorted(mapped_free):
            continue  # the output's free-dimension order would change
        ins[k] = prev.inputs[0]
        dims[k] = [tuple(perm[d] for d in contract), tuple(perm[d] for d in batch)]
        changed = True
    if not changed:
        return None
    dn = ((dims[0][0], dims[1][0]), (dims[0][1], dims[1][1]))
    return Eqn(e.prim, ins, e.outputs, {"dimension_numbers": dn})


def _def_use(jaxpr: Jaxpr):
    """(producer eqn of each var, use count of each var, last consuming eqn of each var); a
    program output counts as two uses, so that no rewrite folds it into a bigger expression."""
    producers: dict[int, Eqn] = {}
    uses: dict[int, int] = {}
    consumer: dict[int, Eqn] = {}
    for e in jaxpr.eqns:
        for v in e.outputs:
            producers[id(v)] = e
        for x in e.inputs:
            if isinstance(x, Var):
                uses[id(x)] = uses.get(id(x), 0) + 1
                consumer[id(x)] = e
    for x in jaxpr.outvars:
        if isinstance(x, Var):
            uses[id(x)] = uses.get(id(x), 0) + 2
    return producers, uses, consumer


def merge_slice_transposes(jaxpr: Jaxpr) -> Jaxpr:
    """A sum of zero-pads whose pieces tile one axis (the transpose of splitting a tensor into
    slices: `q, k, v = y.chunk(3, -1)` gives three pads and two adds in the backward) becomes one
    `concatenate` of the pieces: one buffer written once. Each element is its piece's value plus
    zeros, so the values are the same; a -0.0 piece stays -0.0, as in torch's own split backward."""
    from thunderx.primitives import binary as B
    from thunderx.primitives.slicing import concatenate_p, pad_p

    producers, uses, consumer = _def_use(jaxpr)

    def single_use(x, prim):
        p = producers.get(id(x)) if isinstance(x, Var) else None
        return p if p is not None and p.prim is prim and uses.get(id(x)) == 1 else None

    def leaves(e):
        out = []
        for x in e.inputs:
            inner = single_use(x, B.add_p)
            out += leaves(inner) if inner is not None else [x]
        return out

    eqns, changed = [], False
    for e in jaxpr.eqns:
        root = e.prim is B.add_p and not (
            uses.get(id(e.outputs[0])) == 1 and consumer[id(e.outputs[0])].prim is B.add_p
        )
        merged = _tiling(leaves(e), e.outputs[0], pad_p, single_use) if root else None
        if merged is not None:
            dim, pieces = merged
            e = Eqn(concatenate_p, pieces, e.outputs, {"dimension": dim})
            changed = True
        eqns.append(e)
    if not changed:
        return jaxpr
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars, check=False)


def _tiling(xs, out: Var, pad_p, single_use):
    """(axis, pieces in order) when every x is a single-use zero pad along one shared axis and the
    pieces cover that axis exactly once; else None."""
    if len(xs) < 2:
        return None
    spans, axis = [], None
    for x in xs:
        p = single_use(x, pad_p)
        if p is None or x.aval.shape != out.aval.shape or x.aval.dtype != out.aval.dtype:
            return None
        value = p.inputs[1]
        if not (isinstance(value, Literal) and type(value.val) is not bool and value.val == 0):
            return None
        config = p.params["padding_config"]
        padded = [
            d for d, (lo, hi, interior) in enumerate(config) if (lo, hi, interior) != (0, 0, 0)
        ]
        if len(padded) != 1 or config[padded[0]][2] != 0 or min(config[padded[0]][:2]) < 0:
            return None
        if axis is not None and padded[0] != axis:
            return None
        axis = padded[0]
        lo, hi, _ = config[axis]
        spans.append((lo, out.aval.shape[axis] - hi, p.inputs[0]))
    spans.sort(key=lambda s: s[0])
    end = 0
    for lo, stop, _ in spans:
        if lo != end:
            return None
        end = stop
    if end != out.aval.shape[axis]:
        return None
    return axis, [piece for _, _, piece in spans]


def batch_horizontal(jaxpr: Jaxpr, max_growth: int = 4) -> Jaxpr:
    """Horizontal batching: `concatenate([expand_dims(op(slice_i(src), *rest))...], d)`, the same
    op with the same params on n same-shaped slices of one tensor (a Python loop of window dot
    products, per-window reductions), becomes one op on the stacked slices through the op's own
    batching rule: one kernel instead of n. The stack is a copy of the slices, so the rewrite is
    skipped when it would hold more than `max_growth` times the source's elements. The op runs
    on the same numbers per slice; a contraction may sum in another order, as vmap would."""
    from thunderx.core import batch_rules
    from thunderx.passes import _param_key, call_primitives, has_effects
    from thunderx.primitives.shape import expand_dims_p
    from thunderx.primitives.slicing import concatenate_p, slice_p

    producers, uses, _ = _def_use(jaxpr)

    def single(x, prim=None):
        p = producers.get(id(x)) if isinstance(x, Var) else None
        ok = p is not None and len(p.outputs) == 1 and uses.get(id(x)) == 1
        return p if ok and (prim is None or p.prim is prim) else None

    def group(cat: Eqn):
        d = cat.params["dimension"]
        expands = [single(x, expand_dims_p) for x in cat.inputs]
        if len(expands) < 2 or any(p is None or p.params["dimensions"] != (d,) for p in expands):
            return None
        ops = [single(p.inputs[0]) for p in expands]
        first = ops[0]
        if any(o is None for o in ops) or first.prim in call_primitives:
            return None
        if has_effects(first.prim) or first.prim not in batch_rules:
            return None
        key = _param_key(first.params)
        if any(o.prim is not first.prim or _param_key(o.params) != key for o in ops):
            return None
        if any(len(o.inputs) != len(first.inputs) for o in ops):
            return None
        differ = [
            j
            for j in range(len(first.inputs))
            if any(o.inputs[j] is not first.inputs[j] for o in ops)
        ]
        if len(differ) != 1:
            return None
        k = differ[0]
        slices = [single(o.inputs[k], slice_p) for o in ops]
        if any(s is None for s in slices):
            return None
        src = slices[0].inputs[0]
        piece = first.inputs[k].aval
        if any(s.inputs[0] is not src or s.outputs[0].aval.shape != piece.shape for s in slices):
            return None
        if len(slices) * math.prod(piece.shape) > max_growth * math.prod(src.aval.shape):
            return None
        return d, k, first, slices

    eqns, changed = [], False
    for e in jaxpr.eqns:
        g = group(e) if e.prim is concatenate_p else None
        if g is not None:
            new = _batched_eqns(e, *g, batch_rules)
            if new is not None:
                eqns += new
                changed = True
                continue
        eqns.append(e)
    if not changed:
        return jaxpr
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars, check=False)


def _batched_eqns(cat: Eqn, d: int, k: int, op: Eqn, slices: list, batch_rules) -> list | None:
    """The equations computing `cat`'s output as one batched `op` over the stacked slices."""
    from thunderx.primitives.shape import expand_dims, moveaxis
    from thunderx.primitives.slicing import concatenate
    from thunderx.tracing import trace_flat

    src = slices[0].inputs[0]
    rest = [j for j, x in enumerate(op.inputs) if j != k and isinstance(x, Var)]

    def stacked_op(src_t, *rest_t):
        stacked = _window_stack(src_t, [s.params for s in slices])
        if stacked is None:
            pieces = [expand_dims(s.prim.bind(src_t, **s.params), (0,)) for s in slices]
            stacked = concatenate(pieces, 0)
        args = list(op.inputs)
        args[k] = stacked
        for j, t in zip(rest, rest_t):
            args[j] = t
        args = [a.val if isinstance(a, Literal) else a for a in args]
        dims = [0 if j == k else None for j in range(len(args))]
        out, out_dim = batch_rules[op.prim](args, dims, **op.params)
        return [moveaxis(out, out_dim, d)], None

    try:
        closed, _ = trace_flat(stacked_op, [src.aval] + [op.inputs[j].aval for j in rest])
    except Exception:  # noqa: BLE001 - a rule that cannot batch this op leaves it as it was
        return None
    sub = closed.jaxpr
    got, want = sub.outvars[0].aval, cat.outputs[0].aval
    if sub.constvars or got.shape != want.shape or got.dtype != want.dtype:
        return None
    env: dict[int, object] = {
        id(v): x for v, x in zip(sub.invars, [src] + [op.inputs[j] for j in rest])
    }
    out = []
    for e in sub.eqns:
        ins = [env.get(id(x), x) if isinstance(x, Var) else x for x in e.inputs]
        outs = [Var(v.aval) for v in e.outputs]
        for v, o in zip(e.outputs, outs):
            env[id(v)] = o
        out.append(Eqn(e.prim, ins, outs, e.params))
    result = env.get(id(sub.outvars[0]), sub.outvars[0])
    if not out or result is not out[-1].outputs[0]:
        return None
    out[-1] = Eqn(out[-1].prim, out[-1].inputs, cat.outputs, out[-1].params)
    return out


def _window_stack(src, params: list):
    """The n slices stacked along a new leading axis, when they are sliding windows: equal
    slices except along one axis, where slice i covers [s0 + i*step, s0 + i*step + w) with
    unit stride. Built from w strided slices (column j holds element j of every window) and one
    concatenate instead of n slices: fewer ops when w < n (JAX's convolve tutorial: 62 windows
    of 3). None when the slices are not such windows or w >= n."""
    from thunderx.primitives.shape import expand_dims, moveaxis
    from thunderx.primitives.slicing import concatenate, slice_p

    first = params[0]
    starts = [p["start_indices"] for p in params]
    moving = [a for a in range(len(first["start_indices"])) if len({st[a] for st in starts}) > 1]
    if len(moving) != 1 or len(params) < 2:
        return None
    a = moving[0]
    w = first["limit_indices"][a] - first["start_indices"][a]
    step = starts[1][a] - starts[0][a]
    n = len(params)
    for i, p in enumerate(params):
        if p["strides"] != first["strides"] or p["strides"][a] != 1:
            return None
        if p["start_indices"][a] != starts[0][a] + i * step:
            return None
        if p["limit_indices"][a] - p["start_indices"][a] != w:
            return None
        for b in range(len(first["start_indices"])):
            if b != a and (p["start_indices"][b], p["limit_indices"][b]) != (
                first["start_indices"][b],
                first["limit_indices"][b],
            ):
                return None
    if step < 1 or w >= n:
        return None
    columns = []
    for j in range(w):
        start = list(first["start_indices"])
        limit = list(first["limit_indices"])
        strides = list(first["strides"])
        start[a] = starts[0][a] + j
        limit[a] = start[a] + (n - 1) * step + 1
        strides[a] = step
        col = slice_p.bind(
            src, start_indices=tuple(start), limit_indices=tuple(limit), strides=tuple(strides)
        )
        columns.append(expand_dims(col, (a + 1,)))  # [..., window i at a, element j, ...]
    return moveaxis(concatenate(columns, a + 1), a, 0)
