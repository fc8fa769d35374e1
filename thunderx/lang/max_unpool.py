"""max_unpool1d/2d/3d: zeros of the output size with each input value written at its flat
spatial index. Where indices repeat, torch's CPU kernel writes in input order, so the last
writer's value stays; here each output position gathers from its last writer (a scatter of the
writers' positions with amax), so values are torch's and the gradient is the derivative of that
value: the last writer's. (torch's own backward gathers the cotangent for every writer, which is
not the derivative of its forward when indices repeat.)"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderx.lang._base import aval, ndim, register, shape


def _tuple(v, k):
    return (v,) * k if isinstance(v, int) else tuple(v)


def _max_unpool(k):
    def impl(x, indices, kernel_size, stride=None, padding=0, output_size=None):
        unbatched = ndim(x) == k + 1
        if unbatched:
            x, indices = x.unsqueeze(0), indices.unsqueeze(0)
        if ndim(x) != k + 2 or tuple(shape(indices)) != tuple(shape(x)):
            raise RuntimeError(
                f"max_unpool{k}d: expected input and indices of the same shape, {k + 1}-D or "
                f"{k + 2}-D, got {tuple(shape(x))} and {tuple(shape(indices))}"
            )
        ks = _tuple(kernel_size, k)
        st = ks if stride is None else _tuple(stride, k)
        pad = _tuple(padding, k)
        spatial = tuple(shape(x)[2:])
        default = tuple((n - 1) * s - 2 * p + kk for n, s, p, kk in zip(spatial, st, pad, ks))
        if output_size is None:
            out_sp = default
        else:
            out_sp = tuple(int(s) for s in output_size)[-k:]
            for o, dflt, s in zip(out_sp, default, st):
                if not dflt - s < o < dflt + s:
                    raise ValueError(
                        f"max_unpool{k}d: invalid output_size {tuple(output_size)} (expected "
                        f"each size between {tuple(d - s for d, s in zip(default, st))} and "
                        f"{tuple(d + s for d, s in zip(default, st))}, exclusive)"
                    )
        n, c = shape(x)[:2]
        p, q = math.prod(spatial), math.prod(out_sp)
        xf, idx = x.reshape(n, c, p), indices.reshape(n, c, p)
        dev = aval(x).device
        positions = torch.arange(p, device=dev).expand(n, c, p)
        none = torch.full((n, c, q), -1, dtype=torch.int64, device=dev)
        writer = torch.scatter_reduce(none, 2, idx, positions, "amax", include_self=True)
        got = torch.gather(xf, 2, writer.clamp(min=0))
        out = torch.where(writer >= 0, got, torch.zeros_like(got)).reshape((n, c) + out_sp)
        return out.squeeze(0) if unbatched else out

    impl.__name__ = f"max_unpool{k}d"
    return impl


register(F.max_unpool1d)(_max_unpool(1))
register(F.max_unpool2d)(_max_unpool(2))
register(F.max_unpool3d)(_max_unpool(3))
