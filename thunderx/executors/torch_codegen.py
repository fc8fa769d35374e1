"""The torch executor: a jaxpr becomes readable Python source that calls torch ops directly.

Intermediates that die at an elementwise equation are reused in place when nothing else aliases
them (never a function input, a constant or a view; see inplace.py), and large outputs are written
into buffers recycled across calls (recycle.py). Which outputs are views and which ops have an
in-place or out= form is read from each primitive's declared properties (`prim.props`), proved
against its implementation by the property tests.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from thunderx.core import (
    impl_rules,
    statement_rules,
    torch_codegen_rules,
)
from thunderx.executors import cpu_gemm, cpu_outer
from thunderx.executors.base import Executor, register_executor
from thunderx.executors.inplace import Buffers, inplace_source, plain_view, reusable
from thunderx.executors.kernel_groups import kernel_groups
from thunderx.executors.names import default_codegen, literal, new_namer, param_src
from thunderx.executors.patterns import (
    fresh_index_adds,
    gemm_patterns,
    read_only_constants,
    relu_patterns,
    select_with_zero,
    shared_statistics,
)
from thunderx.executors.patterns_norm import batch_norm_train_call
from thunderx.executors.recycle import (
    out_source,
    output_pools,
    recycled_lines,
)
from thunderx.executors.release import release_line, releases
from thunderx.executors.sources import bind_default_overloads, exec_source
from thunderx.executors.split_phase import split_phase_plan
from thunderx.ir import Jaxpr, Var
from thunderx.primitives.binary import add_p
from thunderx.primitives.custom import keep_derivative_call, keeps_derivative
from thunderx.primitives.higher_order import no_grad_p, stop_gradient_p
from thunderx.primitives.kernel_autograd import for_torch_autograd
from thunderx.primitives.linalg import dot_general_p
from thunderx.primitives.unary import convert_p, select_p


class CompiledProgram:
    """A generated torch function; `source` holds its Python text."""

    def __init__(self, fn: Callable, source: str, fn_plain: Callable, source_plain: str):
        self.fn_single = self.fn_single_plain = None
        self.pools: dict = {}  # the buffers its outputs and intermediates are recycled through
        self.fn = fn
        self.source = source
        self.fn_plain = fn_plain
        self.source_plain = source_plain

    def __call__(self, *args):
        return self.fn(*args)

    def __repr__(self) -> str:
        return self.source

    def as_text(self) -> str:
        return self.source

    def release_buffers(self) -> None:
        """Let go of the buffers kept for recycling (a later call allocates afresh)."""
        for pool in self.pools.values():
            with pool.lock:
                pool.storages.clear()


class CodegenContext:
    """What a statement rule (control flow) gets: the output names, and a way to emit a sub-jaxpr
    as a generated function defined before the main one (its name is returned)."""

    def __init__(
        self, namespace: dict, prelude: list, reuse_buffers: bool, outs: list, autograd=False
    ):
        self.namespace = namespace
        self.prelude = prelude
        self.reuse_buffers = reuse_buffers
        self.outs = outs
        self.autograd = autograd  # bodies of the program torch autograd runs through

    def function(self, jaxpr: Jaxpr, hint: str, bare_return: bool = False) -> str:
        from thunderx.passes import optimize

        name = f"_{hint}{len(self.prelude)}"
        self.prelude.append(None)  # reserve the name before nested bodies take theirs
        index = len(self.prelude) - 1
        src, _ = generate_source(
            # the variant torch autograd runs through keeps custom rules as calls
            optimize(jaxpr, keep_custom_rules=not self.reuse_buffers),
            name,
            self.reuse_buffers,
            bare_return,
            namespace=self.namespace,
            prelude=self.prelude,
            autograd=self.autograd,
        )
        self.prelude[index] = src
        return name

    def param(self, value) -> str:
        return param_src(value, self.namespace)


def generate_source(
    jaxpr: Jaxpr,
    name: str = "jitted",
    reuse_buffers: bool = True,
    bare_return: bool = False,
    namespace: dict | None = None,
    prelude: list | None = None,
    hoist_constants: bool = False,
    pools: dict | None = None,
    onednn: bool | None = None,
    autograd: bool = False,
):
    """Returns (source, namespace) of `def name(consts..., args...)` returning a tuple; the
    functions of control-flow bodies come first in the source. `hoist_constants`: small `full`
    results that are only read are made once, here, instead of on every call. `pools`: the
    OutputPools of one program (by output index, and by shape and dtype for intermediates),
    shared by its variants; large outputs and intermediates are written into recycled buffers
    (see recycle.py). `onednn` (cpu_gemm.py): None, the products oneDNN runs faster call it in
    the variant with buffer reuse, beside the MKL call taken under torch.func transforms and
    dispatch modes; True, they call it alone (a program traced for inductor); False, never.
    `autograd`: the program torch autograd runs through, where a kernel torch cannot
    differentiate runs inside a Function with thunderx's derivative (kernel_autograd.py)."""
    if autograd:
        jaxpr = for_torch_autograd(jaxpr)
    namer = new_namer()
    top = prelude is None
    prelude = [] if prelude is None else prelude
    if namespace is None:
        namespace = {"torch": torch, "inf": math.inf, "nan": math.nan, "device": torch.device}
        namespace.update({f"_impl_{p.name}": fn for p, fn in impl_rules.items()})
    params = [namer(v) for v in jaxpr.constvars + jaxpr.invars]
    lines = [f"def {name}({', '.join(params)}):"]
    last_use: dict[int, int] = {}
    for i, e in enumerate(jaxpr.eqns):
        for x in e.inputs:
            if isinstance(x, Var):
                last_use[id(x)] = i
    for x in jaxpr.outvars:
        if isinstance(x, Var):
            last_use[id(x)] = len(jaxpr.eqns)
    # Alias roots: every var maps to the buffer it may share storage with.
    root: dict[int, int] = {}
    owned: set[int] = set()  # buffers allocated by this function, safe to overwrite
    live_views: dict[int, int] = {}  # root -> number of live vars on it
    # reshapes and transposes covering a whole owned buffer (see plain_view): written into in
    # place, they write into that buffer's storage alone
    plain_views: set[int] = set()
    state = Buffers(root, owned, live_views, plain_views)

    relus, skipped = relu_patterns(jaxpr)
    affine, affine_skipped = kernel_groups(jaxpr)
    # a forward a kernel group emits (or drops) names no statistics for a later backward
    shared = shared_statistics(jaxpr, set(affine) | affine_skipped)
    skipped |= affine_skipped
    index_adds, full_skipped = fresh_index_adds(jaxpr)
    skipped |= full_skipped
    for i, (_, _, operands) in affine.items():
        for x in operands:  # read by the fused call: no equation before it writes them
            last_use[id(x)] = max(last_use.get(id(x), i), i)
    keep, bias_adds = None, set()
    if onednn:  # a graph for inductor: a bias add or SGD update after a product below oneDNN's
        # size stays its own equation, which inductor fuses into the next kernel (addmm's bias
        # costs a strided copy and a beta=1 GEMM: 34 us against mm's 23 at 256x128x128), spelled
        # so that inductor's own CPU pattern (add of an mm -> addmm) does not fuse it back: a
        # broadcast add of the product's unsqueezed rows

        def keep(i, fused):
            large = _large_onednn_product(jaxpr, jaxpr.eqns[i], i, {i: fused})
            if not large:
                bias_adds.add(i)
            return large

    linears = gemm_patterns(jaxpr, last_use, keep)
    skipped |= {j for fused in linears.values() for j in fused[2]}
    starts, waits = split_phase_plan(jaxpr, namer, namespace, param_src)
    hoisted = read_only_constants(jaxpr) if hoist_constants else set()
    release = releases(jaxpr, last_use, skipped | hoisted, affine)
    reused: dict[int, int] = {}  # equation index -> the input it wrote its result into
    onednn_calls = 0
    # equation index -> the name of its pool's take()
    recycled = (
        output_pools(jaxpr, pools, namespace, last_use, skipped | hoisted | set(affine))
        if top and reuse_buffers
        else {}
    )
    for i, e in enumerate(jaxpr.eqns):
        release_line(lines, release.get(i - 1), reused.get(i - 1), namer)
        while starts and starts[0][0] < i:  # collectives whose operands exist by now
            lines.append(starts.pop(0)[1])
        if i in skipped:
            continue
        if i in affine:
            outs, template, operands = affine[i]
            lhs = ", ".join("_" if v is None else namer(v) for v in outs)
            lines.append(f"    {lhs} = {template.format(*(namer(x) for x in operands))}")
            for v in outs:
                if v is not None:  # fresh tensors of torch's kernels
                    root[id(v)] = id(v)
                    owned.add(id(v))
                    live_views[id(v)] = live_views.get(id(v), 0) + 1
            continue
        if i in hoisted:
            # made once: never owned, so nothing writes into it
            v = e.outputs[0]
            with torch.inference_mode(False):  # usable by autograd later, whatever mode now
                value = impl_rules[e.prim](**e.params)
            shown = f"{e.params['shape']}, {literal(e.params['fill_value'])}"
            lines.append(f"    {namer(v)} = {param_src(value, namespace)}  # full({shown})")
            root[id(v)] = id(v)
            live_views[id(v)] = live_views.get(id(v), 0) + 1
            continue
        args = [namer(x) for x in e.inputs]
        avals = [x.aval for x in e.inputs]
        out = e.outputs
        expr = None
        if i in relus:
            x = e.inputs[2]
            ok = reuse_buffers and reusable(x, out[0].aval, i, last_use, state)
            expr = f"{args[2]}.relu_()" if ok else f"torch.relu({args[2]})"
            if ok:
                reused[i] = id(x)
        elif i in index_adds:
            template, operands = index_adds[i]
            expr = template.format(*(namer(x) for x in operands))
        elif i in shared:
            expr = shared[i].format(*args)
        elif i in linears:
            operands, template, _ = linears[i]
            expr = template.format(*(namer(x) for x in operands))
        elif i in bias_adds and e.prim is add_p:
            expr = f"({args[0]}.unsqueeze(0) + {args[1]}.unsqueeze(0)).squeeze(0)"
        elif e.prim is select_p and reuse_buffers:
            # a mask of the bits, which torch autograd cannot differentiate: not in the variant
            # torch autograd runs through
            expr = select_with_zero(e, args)
        elif i in waits:
            expr = waits[i]
        special = expr is not None  # a pattern's expression, not the primitive's own
        if expr is None and reuse_buffers and len(out) == 1:
            # (before a recycled buffer: writing over a dead operand allocates nothing, and
            # measured 5% faster on a 16 MiB elementwise chain)
            expr, into = inplace_source(e, args, i, last_use, state)
            if into is not None:  # the result is that input's buffer
                reused[i] = id(into)
        if expr is None and e.prim in statement_rules:
            outs = [namer(v) for v in out]
            ctx = CodegenContext(namespace, prelude, reuse_buffers, outs, autograd)
            rule = torch_codegen_rules[e.prim]
            lines.extend("    " + ln for ln in rule(args, avals, ctx=ctx, **e.params))
            for v in out:  # may alias an input (a loop that ran zero times): never reused
                root[id(v)] = id(v)
                live_views[id(v)] = live_views.get(id(v), 0) + 1
            for x in e.inputs:
                if isinstance(x, Var) and root.get(id(x)) is not None:
                    owned.discard(root[id(x)])  # an output may be this very buffer
                    if last_use.get(id(x)) == i:
                        live_views[root[id(x)]] -= 1
            continue
        aliases: tuple = ()
        if expr is None:
            rule = torch_codegen_rules.get(e.prim)
            if e.prim in _DETACHING and not reuse_buffers:
                # the program torch autograd runs through: `x.detach()` and torch.no_grad()
                # blocks of the traced function keep cutting its graph
                expr = f"{args[0]}.detach()"
            elif keeps_derivative(e) and not reuse_buffers:
                # torch autograd sees the first operand's derivative (primitives/custom.py)
                expr = f"(_keep_derivative({args[0]}, {args[-1]}),)"
            elif (
                e.prim is dot_general_p
                and onednn is None
                and (bmm := cpu_outer.bmm_source(*args, avals, **e.params, out_aval=out[0].aval))
            ):
                expr = bmm  # this machine's faster kernel for a batched outer product
            elif rule is not None:
                expr = rule(args, avals, **e.params)
            if expr is None:  # no rule, or one that declines this equation: the impl's call
                expr = default_codegen(e.prim, args, e.params, namespace)
            aliases = e.prim.props.alias_positions(len(e.inputs))
            if e.prim is convert_p and avals[0].dtype != out[0].aval.dtype:
                aliases = ()  # `x.to(dtype)` to another dtype: a new tensor (recyclable)
        lhs = ", ".join(namer(v) for v in out)
        if e.prim.multiple_results:
            lhs += "," if len(out) == 1 else ""
        into = fast = None
        if (reuse_buffers if onednn is None else onednn) and i not in reused and not aliases:
            least = cpu_gemm.MIN_MACS_INDUCTOR if onednn else None
            fast = cpu_gemm.onednn_source(expr, _product(jaxpr, e, i, linears), least)
        if i in recycled and not aliases and i not in reused and fast is None:
            into = out_source(e, args, expr, lhs, special)
        if fast is not None:
            lines.append(f"    {lhs} = {fast if onednn else f'({fast} if _dnn else {expr})'}")
            onednn_calls += 1
        elif into is not None:
            lines.extend(recycled_lines(lhs, recycled[i], expr, into))
        else:  # an equation without outputs (a debug callback) is a statement
            lines.append(f"    {lhs} = {expr}" if out else f"    {expr}")
        aliased = [root.get(id(e.inputs[k]), id(e.inputs[k])) for k in aliases]
        aliased = [r for k, r in zip(aliases, aliased) if isinstance(e.inputs[k], Var)]
        for v in out:
            if not aliases:
                root[id(v)] = id(v)
                if not e.prim.props.overlapping:
                    owned.add(id(v))
            else:
                root[id(v)] = aliased[0] if aliased else id(v)
                # a view of several buffers: the others are never overwritten from now on
                owned.difference_update(aliased[1:])
                if plain_view(e, state):
                    plain_views.add(id(v))
            r = root[id(v)]
            live_views[r] = live_views.get(r, 0) + 1
        for x in e.inputs:
            if isinstance(x, Var) and last_use.get(id(x)) == i:
                r = root.get(id(x))
                if r is not None:
                    live_views[r] -= 1
    last = len(jaxpr.eqns) - 1
    release_line(lines, release.get(last), reused.get(last), namer)
    if onednn_calls:
        if not onednn:  # whether the oneDNN kernel may run, checked once per call
            lines.insert(1, f"    _dnn = {cpu_gemm.GUARD}()")
        namespace.update(cpu_gemm.namespace_entries())
    outs = ", ".join(namer(x) for x in jaxpr.outvars)
    if bare_return:
        lines.append(f"    return {outs}")
    else:
        lines.append(f"    return ({outs}{',' if len(jaxpr.outvars) == 1 else ''})")
    src = bind_default_overloads("\n".join(lines) + "\n")
    if top and prelude:
        src = "\n".join(prelude) + "\n" + src
    return src, namespace


def _product(jaxpr: Jaxpr, e, i: int, linears: dict) -> tuple[int, int] | None:
    """(multiply-adds, columns) of equation `i` when it is a float32 CPU product without batch
    dims (or a bias or SGD pattern around one), which oneDNN may run (cpu_gemm.py); None
    otherwise."""
    if i in linears:
        dots = [jaxpr.eqns[j] for j in linears[i][2] if jaxpr.eqns[j].prim is dot_general_p]
        if len(dots) != 1:
            return None
        e = dots[0]
    elif e.prim is not dot_general_p:
        return None
    (lc, rc), (lb, _) = e.params["dimension_numbers"]
    x, y = e.inputs[0].aval, e.inputs[1].aval
    k = math.prod(x.shape[d] for d in lc)
    columns = math.prod(s for d, s in enumerate(y.shape) if d not in rc)
    return None if lb else cpu_gemm.product(e.outputs[0].aval, k, columns)


def _large_onednn_product(jaxpr: Jaxpr, e, i: int, linears: dict) -> bool:
    product = _product(jaxpr, e, i, linears)
    return product is not None and product[0] >= cpu_gemm.MIN_MACS_INDUCTOR and cpu_gemm.chosen()


# identities for thunderx's transforms that cut torch autograd's graph
_DETACHING = (stop_gradient_p, no_grad_p)


def compile_jaxpr(jaxpr: Jaxpr, name: str = "jitted", calls: dict | None = None) -> CompiledProgram:
    """Generate, compile and return the program; consts are its leading arguments. `calls`:
    `{"_impl_<name>": callable}` for equations of primitives made outside the registry (the
    inductor executor's compiled regions)."""

    pools: dict = {}  # the recycled buffers both variants with reuse write into

    def gen(reuse: bool, **kw):
        ns = base_namespace() | (calls or {})
        return generate_source(
            jaxpr, name, reuse, namespace=ns, hoist_constants=True, pools=pools, **kw
        )

    src, ns = gen(True)
    src_plain, ns_plain = gen(False, autograd=True)
    fn = exec_source(src, ns, name)
    fn_plain = fn if src_plain == src else exec_source(src_plain, ns_plain, name)
    prog = CompiledProgram(fn, src, fn_plain, src_plain)
    prog.pools = pools
    if len(jaxpr.outvars) == 1:
        # jit's fast path calls these: the one output without a tuple around it
        prog.fn_single = exec_source(*gen(True, bare_return=True), name)
        prog.fn_single_plain = exec_source(*gen(False, bare_return=True, autograd=True), name)
    return prog


def plain_function(jaxpr: Jaxpr, name: str = "jitted", single: bool = False):
    """(function, source) of the program variant without in-place reuse alone (the one torch
    autograd runs through); `single`: the one output bare."""
    src, ns = generate_source(
        jaxpr, name, False, single, namespace=base_namespace(), hoist_constants=True, autograd=True
    )
    return exec_source(src, ns, name), src


class TorchAutogradProgram:
    """The torch executor's program of `jaxpr` without in-place reuse, generated on first use:
    what an executor whose kernels torch autograd cannot see through (inductor's compiled
    regions, nvFuser fusions) runs when an input requires grad. `single`: the one output bare."""

    def __init__(self, jaxpr: Jaxpr, name: str, single: bool = False):
        self._jaxpr, self._name, self._single = jaxpr, name, single
        self._fn: Callable | None = None

    def __call__(self, *args):
        fn = self._fn
        if fn is None:
            fn = self._fn = plain_function(self._jaxpr, self._name, self._single)[0]
        return fn(*args)


def eqn_source(e, namer, namespace, prelude: list) -> list[str]:
    """One equation as lines of Python calling torch (no in-place reuse); control flow emits
    statements, and the functions of its bodies go to `prelude` (to be placed first)."""
    args = [namer(x) for x in e.inputs]
    avals = [x.aval for x in e.inputs]
    outs = [namer(v) for v in e.outputs]
    if e.prim in statement_rules:
        ctx = CodegenContext(namespace, prelude, False, outs)
        return ["    " + ln for ln in torch_codegen_rules[e.prim](args, avals, ctx=ctx, **e.params)]
    rule = torch_codegen_rules.get(e.prim)
    if rule is not None:
        expr = rule(args, avals, **e.params)
    else:
        expr = default_codegen(e.prim, args, e.params, namespace)
    if not outs:  # a statement (a debug callback)
        return [f"    {expr}"]
    lhs = ", ".join(outs) + ("," if e.prim.multiple_results and len(outs) == 1 else "")
    return [f"    {lhs} = {expr}"]


def base_namespace() -> dict:
    """The globals generated source starts from: torch, constants, every primitive's impl."""
    ns: dict = {"torch": torch, "inf": math.inf, "nan": math.nan, "device": torch.device}
    ns.update({f"_impl_{p.name}": fn for p, fn in impl_rules.items()})
    ns["_batch_norm_train"] = batch_norm_train_call
    ns["_keep_derivative"] = keep_derivative_call
    return ns


class TorchExecutor(Executor):
    """Readable generated Python calling torch ops directly; any device."""

    name = "torch"
    title = "torch codegen"

    def is_default_for(self, device_types: set[str]) -> bool:
        return True

    def lower(self, jaxpr: Jaxpr) -> CompiledProgram:
        return compile_jaxpr(jaxpr)


register_executor(TorchExecutor())
