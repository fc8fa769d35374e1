"""Self-contained HTML for Jupyter: jaxprs (aligned equations, shapes and dtypes, primitive names
highlighted, sub-jaxprs collapsible, a summary of counts), lowered programs and fusion regions.
No external resources: styles are inline in each fragment."""

from __future__ import annotations

import collections
import html

from thunderx.printing import Namer, format_param

STYLE = """<style>
.tx{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px;
    line-height:1.45;color:#1f2328;background:#fbfbfc;border:1px solid #d0d7de;border-radius:6px;
    padding:8px 10px;margin:4px 0;overflow-x:auto;max-width:100%}
.tx table{border-collapse:collapse}
.tx td{padding:0 8px 0 0;vertical-align:top;white-space:pre}
.tx .var{color:#0550ae}.tx .ty{color:#6e7781}.tx .prim{color:#8250df;font-weight:600}
.tx .par{color:#953800}.tx .lit{color:#116329}.tx .kw{color:#cf222e}
.tx .sum{color:#57606a;margin-bottom:4px}.tx .badge{display:inline-block;background:#eaeef2;
    border-radius:10px;padding:0 7px;margin:0 4px 2px 0;font-size:11px}
.tx details{margin-left:16px}.tx summary{cursor:pointer;color:#57606a}
.tx .region{border-left:4px solid var(--c);padding-left:6px}
.tx pre{margin:0;white-space:pre}
.tx h4{margin:6px 0 4px 0;font-size:13px}
</style>"""

PALETTE = ["#2da44e", "#bf8700", "#0969da", "#cf222e", "#8250df", "#1b7c83", "#9a6700", "#e16f24"]


def esc(s) -> str:
    return html.escape(str(s), quote=False)


def summary_counts(jaxpr) -> collections.Counter:
    return collections.Counter(e.prim.name for e in jaxpr.eqns)


def _typed(namer, v) -> str:
    return f'<span class="var">{esc(namer(v))}</span><span class="ty">:{esc(v.aval.str_short())}</span>'


def _atom(namer, x) -> str:
    from thunderx.ir import Literal

    if isinstance(x, Literal):
        return f'<span class="lit">{esc(repr(x.val))}</span>'
    return f'<span class="var">{esc(namer(x))}</span>'


def _params_html(eqn, namer) -> tuple[str, list[str]]:
    from thunderx.ir import ClosedJaxpr, Jaxpr

    inline, subs = [], []
    for k, v in eqn.params.items():
        if k.startswith("_"):
            continue
        if isinstance(v, tuple) and v and all(isinstance(b, Jaxpr) for b in v):
            for i, b in enumerate(v):  # the branches of a cond
                subs.append(
                    f"<details><summary>{esc(k)}[{i}]: {len(b.eqns)} equations</summary>"
                    f"{jaxpr_body(b, Namer())}</details>"
                )
            inline.append(f"{esc(k)}=&lt;{len(v)} jaxprs&gt;")
            continue
        if isinstance(v, (Jaxpr, ClosedJaxpr)):
            sub = v.jaxpr if isinstance(v, ClosedJaxpr) else v
            subs.append(
                f"<details><summary>{esc(k)}: {len(sub.eqns)} equations</summary>"
                f"{jaxpr_body(sub, Namer())}</details>"
            )
            inline.append(f"{esc(k)}=&lt;jaxpr&gt;")
        else:
            inline.append(f"{esc(k)}={esc(format_param(v, 0, namer))}")
    text = f'<span class="par">[{" ".join(inline)}]</span>' if inline else ""
    return text, subs


def jaxpr_body(jaxpr, namer: Namer, regions: list | None = None) -> str:
    consts = " ".join(_typed(namer, v) for v in jaxpr.constvars)
    ins = " ".join(_typed(namer, v) for v in jaxpr.invars)
    rows = [
        f'<tr><td colspan="3"><span class="kw">{{ lambda</span> {consts} ; {ins}. '
        f'<span class="kw">let</span></td></tr>'
    ]
    for i, e in enumerate(jaxpr.eqns):
        lhs = " ".join(_typed(namer, v) for v in e.outputs)
        params, subs = _params_html(e, namer)
        rhs = " ".join(_atom(namer, x) for x in e.inputs)
        style = ""
        if regions is not None and regions[i] is not None:
            style = f' class="region" style="--c:{PALETTE[regions[i] % len(PALETTE)]}"'
        sub_html = "".join(subs)
        rows.append(
            f"<tr{style}><td>&nbsp;&nbsp;{lhs}</td><td>{'=' if lhs else ''}</td><td>"
            f'<span class="prim">{esc(e.prim.name)}</span>{params} {rhs}{sub_html}</td></tr>'
        )
    outs = ", ".join(_atom(namer, v) for v in jaxpr.outvars)
    rows.append(
        f'<tr><td colspan="3">&nbsp;<span class="kw">in</span> ({outs}) '
        f'<span class="kw">}}</span></td></tr>'
    )
    return "<table>" + "".join(rows) + "</table>"


def counts_html(jaxpr, extra: str = "") -> str:
    c = summary_counts(jaxpr)
    badges = "".join(f'<span class="badge">{esc(k)} × {n}</span>' for k, n in c.most_common())
    return (
        f'<div class="sum">{len(jaxpr.eqns)} equations, {len(jaxpr.invars)} inputs, '
        f"{len(jaxpr.outvars)} outputs{extra}</div><div>{badges}</div>"
    )


def jaxpr_html(jaxpr, regions: list | None = None, max_eqns: int = 400) -> str:
    """The jaxpr as an HTML table; past `max_eqns` the equations fold into a <details>."""
    namer = Namer()
    extra = ""
    if regions is not None:
        n = len({r for r in regions if r is not None})
        extra = f", {n} fusion regions"
    body = jaxpr_body(jaxpr, namer, regions)
    if len(jaxpr.eqns) > max_eqns:
        body = f"<details><summary>show {len(jaxpr.eqns)} equations</summary>{body}</details>"
    return f'{STYLE}<div class="tx">{counts_html(jaxpr, extra)}{body}</div>'


def code_html(title: str, code: str) -> str:
    return f'{STYLE}<div class="tx"><h4>{esc(title)}</h4><pre>{esc(code)}</pre></div>'


def lowered_html(lowered) -> str:
    parts = [f'{STYLE}<div class="tx"><h4>{esc(lowered.name)}: optimized jaxpr</h4>']
    regions = lowered.regions
    parts.append(counts_html(lowered.optimized))
    parts.append(jaxpr_body(lowered.optimized, Namer(), regions))
    parts.append(f"<h4>execution program: {esc(lowered.executor_impl.describe())}</h4>")
    parts.append(f"<pre>{esc(lowered.program_text())}</pre></div>")
    return "".join(parts)
