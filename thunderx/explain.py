"""The stage explorer: `thunderx.explain(f)(*args)` shows the IR at every stage, from the traced
user function through each transform, the optimization passes, the fusion partition, to the
generated torch code and nvFuser definitions, with a diff of equation counts between stages.

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

    def __init__(self, stages, torch_source, fusion_text, name):
        self.stages: list[Stage] = stages
        self.torch_source = torch_source
        self.fusion_text = fusion_text
        self.name = name

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
        parts += [
            "\n== generated torch code ==",
            self.torch_source,
            "\n== nvFuser regions and definitions ==",
            self.fusion_text,
        ]
        return "\n".join(parts)

    def svg(self, stage: int = -1) -> str:
        from thunderx.svg import jaxpr_svg

        s = self.stages[stage]
        return jaxpr_svg(s.jaxpr, s.regions)

    def _repr_html_(self) -> str:
        uid = f"txex{next(_ids)}"
        tabs, panels = [], []
        titles = [s.title for s in self.stages] + ["dataflow", "torch code", "nvFuser"]
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
        contents.append(code_html("generated torch code", self.torch_source).replace(STYLE, ""))
        contents.append(
            code_html("nvFuser regions and FusionDefinitions", self.fusion_text).replace(STYLE, "")
        )
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


def explain(fun: Callable) -> Callable[..., Explanation]:
    """Wrap a (possibly transformed) function; calling it with example arguments returns the
    `Explanation` of every stage."""

    def run(*args) -> Explanation:
        from thunderx.api import make_jaxpr
        from thunderx.executors.nvfuser_exec import NvFuserProgram, partition
        from thunderx.executors.torch_codegen import compile_jaxpr
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
        regions = partition(opt)
        stages.append(
            Stage(
                "fusion partition",
                opt,
                regions,
                note=f"{len({r for r in regions if r is not None})} nvFuser regions (coloured); "
                "the rest runs through torch",
            )
        )
        return Explanation(
            stages,
            compile_jaxpr(opt).source,
            NvFuserProgram(opt).as_text(),
            getattr(fun, "__name__", desc),
        )

    return run
