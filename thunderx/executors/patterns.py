"""Equation patterns the torch executor emits as one torch call: `select(le(x, 0), 0, x)` as
`relu`, `dot_general` plus a broadcast bias as `F.linear` (torch's addmm: the bias added in the
matmul's epilogue, one kernel and one pass over the output instead of two); and which small
constants the program may make once instead of on every call."""

from __future__ import annotations

import math

import torch

from thunderx.core import split_phase_rules, statement_rules
from thunderx.ir import Jaxpr, Literal, Var
from thunderx.primitives.binary import add_p, le_p, mul_p, sub_p
from thunderx.primitives.creation import full_p
from thunderx.primitives.linalg import dot_general_p
from thunderx.primitives.shape import broadcast_in_dim_p, transpose_p
from thunderx.primitives.unary import select_p


def _uses_and_producers(jaxpr):
    uses: dict[int, int] = {}
    producer: dict[int, int] = {}
    for i, e in enumerate(jaxpr.eqns):
        for x in e.inputs:
            if isinstance(x, Var):
                uses[id(x)] = uses.get(id(x), 0) + 1
        for v in e.outputs:
            producer[id(v)] = i
    for x in jaxpr.outvars:
        if isinstance(x, Var):
            uses[id(x)] = uses.get(id(x), 0) + 1
    return uses, producer


def relu_patterns(jaxpr):
    """`select(le(x, 0), 0, x)` is `torch.relu(x)`: one kernel and one allocation instead of
    two, and the same numbers (NaN stays NaN, -0.0 stays -0.0); the comparison is skipped when
    nothing else reads it (a gradient reads it as its mask). `select(gt(x, 0), x, 0)` is not
    relu: it maps NaN to 0."""
    uses, producer = _uses_and_producers(jaxpr)
    relus, skipped = set(), set()
    for i, e in enumerate(jaxpr.eqns):
        if e.prim is not select_p or not e.outputs[0].aval.dtype.is_floating_point:
            continue
        pred, zero, x = e.inputs
        if not (isinstance(zero, Literal) and zero.val == 0 and isinstance(pred, Var)):
            continue
        p = producer.get(id(pred))
        if p is None:
            continue
        cmp = jaxpr.eqns[p]
        if cmp.prim is not le_p:
            continue
        a, b = cmp.inputs
        if a is x and isinstance(b, Literal) and b.val == 0:
            relus.add(i)
            if uses.get(id(pred)) == 1:
                skipped.add(p)
    return relus, skipped


def gemm_patterns(jaxpr, last_use: dict, keep=None) -> dict:
    """Matmuls whose result feeds one update, as one call with the update in the gemm's
    epilogue: `dot(x, w) + broadcast(b)` as `addmm(b, x, w)` (or `F.linear` for a batch of
    rows), `a - dot(x, w) * c` (an SGD step) as `addmm(a, x, w, alpha=-c)`. Returns {index of
    the update: (operand vars, source template of them as {0}, {1}, ..., skipped indices)}. Operands and products are of
    one floating dtype and each product is read only by the pattern; the operands' last uses
    move to the update (`last_use` is updated), so no buffer they hold is overwritten in place
    before the fused call reads it. `keep(index, fused)`, when given, says which to keep."""
    uses, producer = _uses_and_producers(jaxpr)
    found = {}
    for i, e in enumerate(jaxpr.eqns):
        if e.prim is add_p and all(isinstance(x, Var) for x in e.inputs):
            for prod, bias in (e.inputs, e.inputs[::-1]):
                fused = _bias_add(jaxpr, prod, bias, uses, producer)
                if fused is not None:
                    break
        elif e.prim is sub_p and isinstance(e.inputs[0], Var):
            fused = _scaled_subtract(jaxpr, e, uses, producer)
        else:
            continue
        if fused is None or len({v.aval.dtype for v in fused[0]}) != 1:
            continue
        if keep is not None and not keep(i, fused):
            continue
        found[i] = fused
        for x in fused[0]:
            last_use[id(x)] = max(last_use.get(id(x), i), i)
    return found


# (contracting dims of x, of w) of a 2-D product -> how addmm reads x ({1}) and w ({2})
_MM_OPERANDS = {
    ((1,), (0,)): "{1}, {2}",
    ((1,), (1,)): "{1}, {2}.t()",
    ((0,), (0,)): "{1}.t(), {2}",
    ((0,), (1,)): "{1}.t(), {2}.t()",
}


def _product(jaxpr, v, uses, producer):
    """The dot_general producing `v`, read only here, with floating Var operands."""
    p = producer.get(id(v))
    if p is None or uses.get(id(v)) != 1 or jaxpr.eqns[p].prim is not dot_general_p:
        return None
    dot = jaxpr.eqns[p]
    if not all(isinstance(x, Var) for x in dot.inputs):
        return None
    if not dot.outputs[0].aval.dtype.is_floating_point or dot.params["dimension_numbers"][1] != (
        (),
        (),
    ):
        return None
    return p, dot


def _bias_add(jaxpr, prod, bias, uses, producer):
    found = _product(jaxpr, prod, uses, producer)
    q = producer.get(id(bias))
    if found is None or q is None or jaxpr.eqns[q].prim is not broadcast_in_dim_p:
        return None
    p, dot = found
    bcast = jaxpr.eqns[q]
    x, w = dot.inputs
    b = bcast.inputs[0]
    out = dot.outputs[0].aval
    n = len(out.shape)
    if not isinstance(b, Var) or b.aval.shape != out.shape[-1:] or len(w.aval.shape) != 2:
        return None
    if bcast.params["broadcast_dimensions"] != (n - 1,):
        return None
    contracting = dot.params["dimension_numbers"][0]
    skipped = {p} | ({q} if uses.get(id(bias)) == 1 else set())
    nx = len(x.aval.shape)
    if nx == 2 and contracting in _MM_OPERANDS:
        return (b, x, w), "torch.addmm({0}, " + _MM_OPERANDS[contracting] + ")", skipped
    if nx >= 1 and contracting in (((nx - 1,), (1,)), ((nx - 1,), (0,))):
        weight = "{1}" if contracting[1] == (1,) else "{1}.t()"
        linear = "torch.nn.functional.linear({0}, " + weight + ", {2})"
        t = producer.get(id(x))
        tr = jaxpr.eqns[t] if t is not None else None
        if tr is not None and tr.prim is transpose_p and isinstance(tr.inputs[0], Var):
            perm = tuple(tr.params["permutation"])
            if nx > 2 and perm[-1] == nx - 1:
                # rows in another order: the linear of the untransposed rows (one GEMM over a
                # view of them, where torch runs a batched GEMM on the transposed copy), then
                # the same permutation of the result
                skipped |= {t} if uses.get(id(x)) == 1 else set()
                return (tr.inputs[0], w, b), f"{linear}.permute{perm}", skipped
        return (x, w, b), linear, skipped
    return None


def _scaled_subtract(jaxpr, e, uses, producer):
    a, scaled = e.inputs
    m = producer.get(id(scaled)) if isinstance(scaled, Var) else None
    if m is None or uses.get(id(scaled)) != 1 or jaxpr.eqns[m].prim is not mul_p:
        return None
    mul = jaxpr.eqns[m]
    for prod, c in (mul.inputs, mul.inputs[::-1]):
        if not (isinstance(c, Literal) and isinstance(c.val, float) and isinstance(prod, Var)):
            continue
        found = _product(jaxpr, prod, uses, producer)
        if found is None:
            continue
        p, dot = found
        x, w = dot.inputs
        contracting = dot.params["dimension_numbers"][0]
        if len(x.aval.shape) != 2 or len(w.aval.shape) != 2 or contracting not in _MM_OPERANDS:
            continue
        if a.aval.shape != dot.outputs[0].aval.shape:
            continue
        src = "torch.addmm({0}, " + _MM_OPERANDS[contracting] + f", alpha={-c.val!r})"
        return (a, x, w), src, {p, m}
    return None


# A `full` of at most this many elements that is only read becomes a constant of the program
HOIST_MAX_NUMEL = 1024


def read_only_constants(jaxpr: Jaxpr) -> set[int]:
    """Indices of the `full` equations whose result the program only reads: small, not an
    output, and every consumer an ordinary equation that returns no view of it (a view could
    reach the caller, a statement or a collective could write into it). One tensor made when
    the program is compiled then serves every call."""
    found = {
        i: e.outputs[0]
        for i, e in enumerate(jaxpr.eqns)
        if e.prim is full_p and math.prod(e.params["shape"]) <= HOIST_MAX_NUMEL
    }
    if not found:
        return set()
    candidates = {id(v): i for i, v in found.items()}
    for x in jaxpr.outvars:
        candidates.pop(id(x), None)
    for e in jaxpr.eqns:
        aliases = e.prim.props.alias_positions(len(e.inputs))
        for k, x in enumerate(e.inputs):
            if id(x) in candidates and (
                k in aliases or e.prim in statement_rules or e.prim in split_phase_rules
            ):
                del candidates[id(x)]
    return set(candidates.values())


def shared_statistics(jaxpr: Jaxpr, claimed: set = frozenset()) -> dict:
    """A layer, batch or group norm backward that follows the forward of the same input reads the
    statistics the forward computed (torch's kernels return mean and rstd) instead of running
    the forward again. Returns {equation index: source template of its arguments as {0}, ...}.
    A forward at an index in `claimed` (emitted otherwise, or not at all) is no such source."""
    from thunderx.primitives import composite_channel_affine as CA
    from thunderx.primitives.composite_channel_norm import (
        batch_norm_backward_p,
        batch_norm_p,
        bn_backward_source,
        gn_backward_source,
        gn_sizes,
        group_norm_backward_p,
        group_norm_p,
    )
    from thunderx.primitives.composite_norm import layer_norm_backward_p, layer_norm_p
    from thunderx.primitives.composite_norm_affine import (
        backward_source,
        cotangent_p,
        layer_norm_affine_p,
    )

    def layer_norm_affine(x, params, bparams, stats):
        shape = tuple(x.shape[x.ndim - params["normalized_ndim"] :])
        bias = "{2}" if params["has_bias"] else "None"
        eps = params["eps"]
        fwd = f"({stats} := torch.native_layer_norm({{0}}, {shape}, {{1}}, {bias}, {eps!r}))[0]"
        mean, rstd = f"{stats}[1]", f"{stats}[2]"
        return fwd, backward_source("{0}", "{1}", "{2}", shape, mean, rstd, bparams["mask"])

    def layer_norm(x, params, bparams, stats):
        shape = tuple(x.shape[x.ndim - params["normalized_ndim"] :])
        eps = params["eps"]
        fwd = f"({stats} := torch.native_layer_norm({{0}}, {shape}, None, None, {eps!r}))[0]"
        bwd = (
            f"torch.ops.aten.native_layer_norm_backward({{0}}, {{1}}, {shape}, {stats}[1], "
            f"{stats}[2], None, None, [True, False, False])[0]"
        )
        return fwd, bwd

    def channel_norm(x, params, bparams, stats):  # batch norm (no groups) or group norm
        groups, eps = params.get("groups", 0), params["eps"]
        fwd = f"({stats} := {CA.forward_source('{0}', 'None', 'None', x.shape, groups, eps)})[0]"
        mean, rstd = f"{stats}[1]", f"{stats}[2]"
        if not groups:
            return fwd, bn_backward_source("{0}", "{1}", mean, rstd, eps)
        sizes = ", ".join(map(str, gn_sizes(x.shape, groups)))
        return fwd, gn_backward_source("{0}", "{1}", mean, rstd, sizes)

    def channel_affine(x, params, bparams, stats):
        groups, eps = params["groups"], params["eps"]
        bias = "{2}" if params["has_bias"] else "None"
        fwd = f"({stats} := {CA.forward_source('{0}', '{1}', bias, x.shape, groups, eps)})[0]"
        mean, rstd = f"{stats}[1]", f"{stats}[2]"
        mask = bparams["mask"]
        return fwd, CA.backward_source("{2}", "{0}", "{1}", x.shape, mean, rstd, groups, eps, mask)

    # primitive -> (tag, forward templates or None for a backward, position of x)
    kinds = {
        layer_norm_p: ("ln", layer_norm, 0),
        layer_norm_backward_p: ("ln", None, 1),
        batch_norm_p: ("bn", channel_norm, 0),
        batch_norm_backward_p: ("bn", None, 1),
        group_norm_p: ("gn", channel_norm, 0),
        group_norm_backward_p: ("gn", None, 1),
        layer_norm_affine_p: ("lna", layer_norm_affine, 0),
        cotangent_p: ("lna", None, 0),
        CA.channel_affine_p: ("cna", channel_affine, 0),
        CA.cotangent_p: ("cna", None, 0),
    }
    forwards: dict = {}
    out: dict = {}
    for i, e in enumerate(jaxpr.eqns):
        kind = kinds.get(e.prim)
        if kind is None:
            continue
        tag, templates, at = kind
        x = e.inputs[at]
        if not isinstance(x, Var):
            continue
        same = {k: v for k, v in e.params.items() if k in ("normalized_ndim", "eps", "groups")}
        key = (tag, id(x), tuple(sorted(same.items())))
        if templates is not None:
            if i not in claimed:
                forwards.setdefault(key, (i, templates, e.params))
        elif key in forwards:
            j, templates, params = forwards[key]
            out[j], out[i] = templates(x.aval, params, e.params, f"_{tag}_stats{j}")
    return out


# torch.where on CPU runs a scalar loop (~7 ns an element against ~0.1 for relu in torch
# 2.13); a choice between a float tensor and zero is a bit mask on the tensor's bits instead:
# three vectorized kernels, the same bits (NaN payloads and -0.0 kept, +0.0 where zeroed).
_SAME_WIDTH_INT = {
    torch.float16: "torch.int16",
    torch.bfloat16: "torch.int16",
    torch.float32: "torch.int32",
    torch.float64: "torch.int64",
}


def select_with_zero(e, args) -> str | None:
    """`select(pred, 0, x)` / `select(pred, x, 0)` on CPU floats as a mask of x's bits."""
    pred, on_true, on_false = e.inputs
    out = e.outputs[0].aval
    ints = _SAME_WIDTH_INT.get(out.dtype)
    if ints is None or torch.device(out.device).type != "cpu" or not isinstance(pred, Var):
        return None
    zero_true = _positive_zero(on_true) and isinstance(on_false, Var)
    zero_false = _positive_zero(on_false) and isinstance(on_true, Var)
    if zero_true:  # keep x where pred is False: mask = pred - 1 (all ones where False)
        x, mask = args[2], f"{args[0]}.to({ints}).sub_(1)"
    elif zero_false:  # keep x where pred is True: mask = -pred (all ones where True)
        x, mask = args[1], f"{args[0]}.to({ints}).neg_()"
    else:
        return None
    if any(getattr(v.aval, "shape", None) != out.shape for v in (pred, e.inputs[1 + zero_true])):
        return None
    return f"({x}.view({ints}) & {mask}).view({_dtype_name(out.dtype)})"


def _positive_zero(x) -> bool:
    """A literal +0 (the mask writes +0.0 bits; a -0.0 literal keeps torch.where)."""
    return (
        isinstance(x, Literal)
        and type(x.val) in (int, float, bool)
        and x.val == 0
        and math.copysign(1.0, float(x.val)) > 0
    )


def _dtype_name(dtype: torch.dtype) -> str:
    return "torch." + str(dtype).removeprefix("torch.")


def fresh_index_adds(jaxpr: Jaxpr) -> tuple[dict, set]:
    """`index_add(full(...), idx, src)` where nothing else reads the full (an embedding's
    gradient, a gather's transpose): the full is made and added into in place, one pass over
    the table fewer than `index_add`'s copy of it (the same numbers; index_add_ checks the
    indices as index_add does). Returns ({index: expression}, skipped full indices)."""
    from thunderx.primitives.indexing import index_add_p

    uses, producer = _uses_and_producers(jaxpr)
    found, skipped = {}, set()
    for i, e in enumerate(jaxpr.eqns):
        if e.prim is not index_add_p or not all(isinstance(x, Var) for x in e.inputs):
            continue
        x, idx, src = e.inputs
        p = producer.get(id(x))
        if p is None or jaxpr.eqns[p].prim is not full_p or uses.get(id(x)) != 1:
            continue
        fp = jaxpr.eqns[p].params
        fill = fp["fill_value"]
        if type(fill) not in (int, float, bool) or not math.isfinite(fill):
            continue
        axis = e.params["axis"]
        shape = tuple(x.aval.shape)
        flat = shape[:axis] + (math.prod(idx.aval.shape),) + shape[axis + 1 :]
        found[i] = (
            f"torch.full({shape}, {fp['fill_value']!r}, dtype={_dtype_name(fp['dtype'])}, "
            f"device={str(fp['device'])!r}).index_add_({axis}, {{0}}.reshape(-1), "
            f"{{1}}.reshape({flat}))",
            (idx, src),
        )
        skipped.add(p)
    return found, skipped
