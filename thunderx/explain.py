"""The stage explorer: `thunderx.explain(f)(*args)` shows the IR at every stage, from the traced
user function through each transform, the optimization passes, the fusion partition, to the
program of every registered executor (generated torch code, nvFuser definitions, inductor
regions), the one `jit` would run marked, with a diff of equation counts between stages.

>>> ex = thunderx.explain(thunderx.jit(thunderx.vmap(thunderx.grad(loss), (None, 0, 0))))(p, x, y)
>>> ex            # in Jupyter: tabs; elsewhere: a text summary
>>> ex.stages[1].jaxpr
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from typing import Callable

from thunderx import tree
from thunderx.html import STYLE, code_html, counts_html, esc, jaxpr_body
from thunderx.printing import Namer

_ids = itertools.count()


@dataclasses.dataclass
class Stage:
    title: str
    jaxpr: object  # Jaxpr
    regions: list | None = None
    note: str = ""


def _annotation(f):
    return getattr(f, "__thunderx_transform__", None)


def _inner_args(name, info, args):
    if name != "vmap":
        return args
    in_axes = info
    leaves, treedef = tree.flatten(args)
    axes = tree.broadcast_prefix(in_axes if not isinstance(in_axes, list) else tuple(in_axes), args)
    return tree.unflatten(
        treedef, [x if a is None else x.select(a, 0) for x, a in zip(leaves, axes)]
    )


def diff_counts(before, after) -> str:
    """Equations added and removed, per primitive (calls counted by their inlined bodies)."""
    from thunderx.passes import inline_calls

    a = collections.Counter(e.prim.name for e in inline_calls(before).eqns)
    b = collections.Counter(e.prim.name for e in inline_calls(after).eqns)
    added = b - a
    removed = a - b
    parts = [f"+{n} {k}" for k, n in added.most_common()] + [
        f"−{n} {k}" for k, n in removed.most_common()
    ]
    return ", ".join(parts) if parts else "no change in equation counts"


class Explanation:
    """Stages of one function at one signature; prints as text, renders as tabs in Jupyter."""

    def __init__(self, stages, programs, name, executor):
        self.stages: list[Stage] = stages
        #: executor name -> (tab title, header line, program text)
        self.programs: dict[str, tuple[str, str, str]] = programs
        self.name = name
        #: the executor `jit` runs for these arguments
        self.executor = executor

    def __repr__(self) -> str:
        lines = [f"explain({self.name}): {len(self.stages)} stages"]
        prev = None
        for s in self.stages:
            d = f"  [{diff_counts(prev.jaxpr, s.jaxpr)}]" if prev is not None else ""
            lines.append(f"  {s.title}: {len(s.jaxpr.eqns)} equations{d}")
            prev = s
        return "\n".join(lines)

    def text(self) -> str:
        parts = [repr(self)]
        for s in self.stages:
            parts += [f"\n== {s.title} ==", str(s.jaxpr)]
        for title, header, text in self.programs.values():
            parts += [f"\n== {title}: {header} ==", text]
        return "\n".join(parts)

    def svg(self, stage: int = -1) -> str:
        from thunderx.svg import jaxpr_svg

        s = self.stages[stage]
        return jaxpr_svg(s.jaxpr, s.regions)

    def _repr_html_(self) -> str:
        uid = f"txex{next(_ids)}"
        tabs, panels = [], []
        titles = [s.title for s in self.stages] + ["dataflow"]
        titles += [title for title, _, _ in self.programs.values()]
        prev = None
        contents = []
        for s in self.stages:
            diff = (
                f'<div class="sum">vs previous stage: {esc(diff_counts(prev.jaxpr, s.jaxpr))}</div>'
                if prev
                else ""
            )
            note = f'<div class="sum">{esc(s.note)}</div>' if s.note else ""
            contents.append(
                f'<div class="tx">{note}{counts_html(s.jaxpr)}{diff}'
                f"{jaxpr_body(s.jaxpr, Namer(), s.regions)}</div>"
            )
            prev = s
        contents.append(f'<div class="tx" style="overflow:auto">{self.svg()}</div>')
        for _, header, text in self.programs.values():
            contents.append(code_html(header, text).replace(STYLE, ""))
        css = [
            f"#{uid} .pn{{display:none}}",
            f"#{uid} input{{display:none}}",
            f"#{uid} label{{display:inline-block;padding:3px 9px;margin:0 2px 4px 0;border:1px solid #d0d7de;"
            "border-radius:6px 6px 0 0;cursor:pointer;font:12px sans-serif;background:#f6f8fa}",
        ]
        for i, (title, content) in enumerate(zip(titles, contents)):
            checked = " checked" if i == len(self.stages) - 1 else ""
            tabs.append(
                f'<input type="radio" name="{uid}" id="{uid}_{i}"{checked}>'
                f'<label for="{uid}_{i}">{i + 1}. {esc(title)}</label>'
            )
            panels.append(f'<div class="pn p{i}">{content}</div>')
            css.append(f"#{uid}_{i}:checked ~ .panels .p{i}{{display:block}}")
            css.append(f"#{uid}_{i}:checked + label{{background:#fff;font-weight:600}}")
        return (
            f'{STYLE}<style>{"".join(css)}</style><div id="{uid}" class="txexplain">'
            f'<div style="font:600 13px sans-serif;margin:4px 0">explain({esc(self.name)})</div>'
            f'{"".join(tabs)}<div class="panels">{"".join(panels)}</div></div>'
        )


def _chosen_executor(chain, args, executor):
    """The executor jit runs: the one asked for, the jit's own, else the devices' default."""
    from thunderx.executors import default_executor, get_executor

    if executor is not None:
        return get_executor(executor)
    for name, wrapper, _ in chain:
        impl = getattr(wrapper, "jit_function", None)
        if name == "jit" and impl is not None and impl.executor is not None:
            return get_executor(impl.executor)
    devices = {x.device.type for x in tree.leaves(args) if hasattr(x, "device")}
    return default_executor(devices or {"cpu"})


def _programs(opt, chosen) -> dict:
    from thunderx.executors import executors

    out = {}
    for ex in executors():
        try:
            text = ex.lower(opt).as_text()
        except Exception as e:  # noqa: BLE001 - shown in the tab instead of the program
            text = f"cannot lower here: {e}"
        mark = " — used by jit for these arguments" if ex is chosen else ""
        out[ex.name] = (ex.title, ex.describe() + mark, text)
    return out


def explain(fun: Callable, executor: str | None = None) -> Callable[..., Explanation]:
    """Wrap a (possibly transformed) function; calling it with example arguments returns the
    `Explanation` of every stage. `executor` overrides the one jit would choose (it decides the
    fusion partition shown); every registered executor's program is shown either way.

    >>> ex = thunderx.explain(thunderx.jit(f), executor="inductor")(x)  # doctest: +SKIP
    """

    def run(*args) -> Explanation:
        from thunderx.api import make_jaxpr
        from thunderx.executors import executors
        from thunderx.passes import closure_convert, optimize

        chain, f = [], fun
        while _annotation(f) is not None:
            name, inner, info = _annotation(f)
            chain.append((name, f, info))
            f = inner
        level_args = [args]
        for name, _, info in chain:
            level_args.append(_inner_args(name, info, level_args[-1]))
        user_name = getattr(f, "__name__", "f")
        stages = [
            Stage(
                f"traced {user_name}",
                make_jaxpr(f)(*level_args[-1]).jaxpr,
                note="the user function on one example's arguments",
            )
        ]
        desc = user_name
        for k in reversed(range(len(chain))):
            name, wrapper, _ = chain[k]
            desc = f"{name}({desc})"
            stages.append(Stage(desc, make_jaxpr(wrapper)(*level_args[k]).jaxpr))
        final = closure_convert(stages[-1].jaxpr)
        opt = optimize(final)
        stages.append(
            Stage("optimized", opt, note="inlined calls, NaN-safe simplification, CSE, DCE")
        )
        chosen = _chosen_executor(chain, args, executor)
        fuser = chosen
        if chosen.partition(opt) is None:  # show what a fusing executor would do
            fuser = next((ex for ex in executors() if ex.partition(opt) is not None), chosen)
        regions = fuser.partition(opt)
        n = len({r for r in regions if r is not None}) if regions is not None else 0
        stages.append(
            Stage(
                "fusion partition",
                opt,
                regions,
                note=f"{n} {fuser.title} regions (coloured), the rest runs through torch; "
                f"jit runs these arguments on the {chosen.describe()}",
            )
        )
        return Explanation(
            stages, _programs(opt, chosen), getattr(fun, "__name__", desc), chosen.name
        )

    return run
