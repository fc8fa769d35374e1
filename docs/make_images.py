"""Regenerate docs/stage_explorer.png: the stage explorer of jit(vmap(grad(mlp_loss))), rendered
by headless Chromium.   python docs/make_images.py"""

import os
import sys

import torch

import thunderx as tx
from thunderx.browser import render

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from research_fns import data, mlp_loss, mlp_params  # noqa: E402

p = mlp_params(dtype=torch.float32)
x, y = data(dtype=torch.float32)
ex = tx.explain(tx.jit(tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0))))(p, x[:, None], y[:, None])
render(ex._repr_html_(), os.path.join(HERE, "stage_explorer.png"), size=(1400, 1100))
print("wrote docs/stage_explorer.png")
