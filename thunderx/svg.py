"""A dataflow picture of a jaxpr as self-contained SVG (no Graphviz): equations are boxes placed
in layers by dependency depth, edges are curves, fusion regions are coloured."""

from __future__ import annotations

import html

from thunderx.html import PALETTE
from thunderx.ir import Var

BOX_W, BOX_H, GAP_X, GAP_Y = 118, 26, 44, 12


def jaxpr_svg(jaxpr, regions: list | None = None, max_nodes: int = 600) -> str:
    producer: dict[int, int] = {}
    layer: list[int] = []
    for i, e in enumerate(jaxpr.eqns[:max_nodes]):
        preds = [producer[id(x)] for x in e.inputs if isinstance(x, Var) and id(x) in producer]
        layer.append(1 + max((layer[p] for p in preds), default=0))
        for v in e.outputs:
            producer[id(v)] = i
    rows: dict[int, int] = {}
    pos: dict = {}
    for k in range(len(jaxpr.invars)):
        pos[("in", k)] = (0, k)
    rows[0] = len(jaxpr.invars)
    for i, lay in enumerate(layer):
        pos[("eq", i)] = (lay, rows.get(lay, 0))
        rows[lay] = rows.get(lay, 0) + 1
    last = max(layer, default=0) + 1
    for k, _ in enumerate(jaxpr.outvars):
        pos[("out", k)] = (last, k)
    rows[last] = len(jaxpr.outvars)

    def xy(key):
        col, row = pos[key]
        return col * (BOX_W + GAP_X) + 8, row * (BOX_H + GAP_Y) + 8

    width = (last + 1) * (BOX_W + GAP_X) + 16
    height = max(rows.values(), default=1) * (BOX_H + GAP_Y) + 16
    in_index = {id(v): k for k, v in enumerate(jaxpr.invars)}
    edges, boxes = [], []

    def edge(src, dst):
        (x0, y0), (x1, y1) = xy(src), xy(dst)
        x0 += BOX_W
        y0 += BOX_H / 2
        y1 += BOX_H / 2
        mid = (x0 + x1) / 2
        edges.append(
            f'<path d="M{x0},{y0} C{mid},{y0} {mid},{y1} {x1},{y1}" '
            'stroke="#8c959f" fill="none" stroke-width="1"/>'
        )

    def source_of(x):
        if not isinstance(x, Var):
            return None
        if id(x) in producer:
            return ("eq", producer[id(x)])
        if id(x) in in_index:
            return ("in", in_index[id(x)])
        return None

    for i, e in enumerate(jaxpr.eqns[: len(layer)]):
        for x in e.inputs:
            s = source_of(x)
            if s is not None:
                edge(s, ("eq", i))
    for k, v in enumerate(jaxpr.outvars):
        s = source_of(v)
        if s is not None:
            edge(s, ("out", k))

    def box(key, label, fill, title):
        x, y = xy(key)
        boxes.append(
            f'<g><title>{html.escape(title)}</title><rect x="{x}" y="{y}" width="{BOX_W}" '
            f'height="{BOX_H}" rx="5" fill="{fill}" stroke="#57606a" stroke-width="0.8"/>'
            f'<text x="{x + BOX_W / 2}" y="{y + BOX_H / 2 + 4}" text-anchor="middle" '
            f'font-family="monospace" font-size="11">{html.escape(label[:17])}</text></g>'
        )

    for k, v in enumerate(jaxpr.invars):
        box(("in", k), f"in {v.aval.str_short()}", "#ddf4ff", f"input {k}: {v.aval.str_short()}")
    for i, e in enumerate(jaxpr.eqns[: len(layer)]):
        r = regions[i] if regions is not None else None
        fill = "#ffffff" if r is None else PALETTE[r % len(PALETTE)] + "55"
        outs = ", ".join(v.aval.str_short() for v in e.outputs)
        note = f" (fusion region {r})" if r is not None else ""
        box(("eq", i), e.prim.name, fill, f"{e.prim.name} -> {outs}{note}")
    for k, v in enumerate(jaxpr.outvars):
        box(("out", k), f"out {v.aval.str_short()}", "#fff8c5", f"output {k}")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">{"".join(edges)}{"".join(boxes)}</svg>'
    )
