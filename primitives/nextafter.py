"""nextafter(x, y): the next representable float after x toward y (torch.nextafter). It moves x
by at most one ulp, so torch gives it derivative 1 in x and 0 in y; batching is elementwise."""

from __future__ import annotations

import torch

from thunderx.ad_util import Zero
from thunderx.core import declare, get_aval
from thunderx.primitives._elementwise import elementwise_batch, nary_abstract_eval


def _jvp(primals, tangents):
    x, y = primals
    out = nextafter_p.bind(x, y)
    tx = tangents[0]
    return out, (Zero(get_aval(out)) if type(tx) is Zero else tx)


nextafter_p = declare(
    "nextafter",
    impl=torch.nextafter,
    abstract_eval=lambda x, y: nary_abstract_eval("nextafter", x, y),
    jvp=_jvp,
    batch=lambda args, dims: elementwise_batch(nextafter_p, args, dims),
    torch_codegen=lambda args, avals: f"torch.nextafter({args[0]}, {args[1]})",
    elementwise=True,
)
