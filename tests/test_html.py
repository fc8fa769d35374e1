"""HTML reprs, the stage explorer and the SVG dataflow: structure, and a real headless browser."""

import os
import re
import tempfile

import pytest
import torch

import thunderx as tx
from thunderx.browser import find_chromium, render

from .research_fns import data, mlp_loss, mlp_params


def _explanation():
    p = mlp_params(dtype=torch.float32)
    x, y = data(dtype=torch.float32)
    return tx.explain(tx.jit(tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0))))(
        p, x[:, None], y[:, None]
    )


def test_jaxpr_html_structure():
    inner = tx.jit(lambda v: torch.sin(v) * 2)
    closed = tx.make_jaxpr(lambda v: inner(v).sum())(torch.ones(3))
    h = closed._repr_html_()
    assert "<table>" in h and '<span class="prim">jit_call</span>' in h
    assert "<details>" in h  # the sub-jaxpr is collapsible
    assert '<span class="prim">sin</span>' in h and "f32[3]" in h
    assert re.search(r"2 equations", h)
    assert not re.search(r"https?://|<link|<script|src=", h)  # self-contained


def test_long_programs_are_summarized():
    closed = tx.make_jaxpr(lambda v: sum(torch.sin(v * i) for i in range(300)))(torch.ones(2))
    h = closed._repr_html_()
    assert "show " in h and "<details>" in h and "sin × 300" in h


def test_explanation_has_every_stage_and_diffs():
    ex = _explanation()
    titles = [s.title for s in ex.stages]
    assert titles[0] == "traced mlp_loss"
    assert titles[1:4] == ["grad(mlp_loss)", "vmap(grad(mlp_loss))", "jit(vmap(grad(mlp_loss)))"]
    assert titles[-2:] == ["optimized", "fusion partition"]
    assert "dot_general" in repr(ex) and "+" in repr(ex)
    h = ex._repr_html_()
    for t in titles + ["dataflow", "torch code", "nvFuser"]:
        assert t in h
    assert "fd.define_tensor" in h and "def jitted(" in h
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", h)


def test_svg_is_self_contained_and_colours_regions():
    ex = _explanation()
    svg = ex.svg()
    assert svg.startswith("<svg") and svg.count("<rect") >= len(ex.stages[-1].jaxpr.eqns)
    assert "55" in svg  # translucent region fills
    assert "<image" not in svg and "href" not in svg


@pytest.mark.skipif(
    find_chromium() is None, reason="Debian's chromium is not installed (make test installs it)"
)
def test_explorer_renders_in_a_real_browser():
    from PIL import Image

    ex = _explanation()
    with tempfile.TemporaryDirectory() as d:
        png = os.path.join(d, "shot.png")
        dom = render(ex._repr_html_(), png, size=(1280, 1000))
        assert "dot_general" in dom and "fusion partition" in dom
        img = Image.open(png).convert("L")
        w, h = img.size
        assert (w, h) == (1280, 1000)
        px = img.load()
        dark = sum(1 for x in range(0, w, 4) for y in range(0, h, 4) if px[x, y] < 200)
        frac = dark / ((w // 4) * (h // 4))
        assert 0.02 < frac < 0.6, f"screenshot looks blank or broken ({frac:.3f} dark)"
        # text spans most of the width, not one squashed column
        cols = [x for x in range(0, w, 4) if any(px[x, y] < 200 for y in range(0, h, 8))]
        assert max(cols) - min(cols) > w * 0.4
