"""Issue #21's named everyday functions (linear algebra, sorting, special functions, array ops):
each runs through tests/test_lang.py's checks (traced, jit and float32 against eager torch, vjp
against torch.autograd, vmap against a loop). Outputs with a sign or order freedom (eigenvectors,
singular vectors) enter through quantities torch fixes (reconstructions, |v|)."""

import torch
import torch.nn.functional as F

from .lang_cases import idx, pos, r


def _spd(n, seed=0):
    a = r(n, n, seed=seed)
    return a @ a.mT + n * torch.eye(n, dtype=torch.float64)


def _tril(n):
    return torch.tril(r(n, n)) + 3 * torch.eye(n, dtype=torch.float64)


NAMED = [
    ("linalg.solve", torch.linalg.solve, (_spd(4), r(4, 2))),
    ("linalg.inv", torch.linalg.inv, (_spd(4),)),
    ("linalg.det", torch.linalg.det, (r(4, 4),)),
    ("linalg.slogdet", lambda a: torch.linalg.slogdet(a)[1], (r(4, 4),)),
    ("linalg.cholesky", torch.linalg.cholesky, (_spd(4),)),
    ("linalg.eigh", lambda a: torch.linalg.eigh(a)[0], (_spd(4),)),
    ("linalg.eigh_vectors", lambda a: torch.linalg.eigh(a)[1].abs(), (_spd(3, seed=2),)),
    (
        "linalg.svd",
        lambda a: (lambda u, s, vh: (u * s) @ vh)(*torch.linalg.svd(a, False)),
        (r(4, 3),),
    ),
    ("linalg.svdvals", torch.linalg.svdvals, (r(4, 3),)),
    ("linalg.qr", lambda a: torch.linalg.qr(a), (r(4, 3),)),
    ("linalg.matrix_exp", torch.linalg.matrix_exp, (r(3, 3) * 0.5,)),
    (
        "linalg.solve_triangular",
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=False),
        (_tril(4), r(4, 2)),
    ),
    (
        "cholesky_solve",
        lambda b, a: torch.cholesky_solve(b, torch.linalg.cholesky(a)),
        (r(4, 2), _spd(4)),
    ),
    ("linalg.lstsq", lambda a, b: torch.linalg.lstsq(a, b).solution, (r(5, 3), r(5, 2))),
    ("sort", lambda x: torch.sort(x, -1), (r(3, 5),)),
    ("argsort", lambda x: torch.argsort(x, -1, descending=True), (r(3, 5),)),
    ("topk", lambda x: torch.topk(x, 2, -1), (r(3, 5),)),
    ("kthvalue", lambda x: torch.kthvalue(x, 2, -1), (r(3, 5),)),
    ("median", lambda x: torch.median(x, -1), (r(3, 5),)),
    ("quantile", lambda x: torch.quantile(x, 0.3, dim=-1), (r(3, 5),)),
    ("cummax", lambda x: torch.cummax(x, -1), (r(3, 5),)),
    ("logcumsumexp", lambda x: torch.logcumsumexp(x, -1), (r(3, 5),)),
    ("searchsorted", lambda s, v: torch.searchsorted(s, v), (torch.sort(r(6))[0], r(4))),
    ("lgamma", torch.lgamma, (pos(5),)),
    ("digamma", torch.digamma, (pos(5),)),
    ("special.i0", torch.special.i0, (r(5),)),
    ("special.gammaln", torch.special.gammaln, (pos(5),)),
    ("masked_fill", lambda x, m: x.masked_fill(m, 0.5), (r(3, 4), r(3, 4) > 0)),
    ("kron", torch.kron, (r(2, 3), r(3, 2))),
    ("linalg.cross", torch.linalg.cross, (r(4, 3), r(4, 3))),
    ("diff", lambda x: torch.diff(x, n=2, dim=-1), (r(3, 6),)),
    ("trapezoid", lambda y, x: torch.trapezoid(y, x), (r(3, 5), torch.sort(r(5))[0])),
    ("meshgrid", lambda a, b: torch.meshgrid(a, b, indexing="ij"), (r(3), r(4))),
    ("rot90", lambda x: torch.rot90(x, 1, (0, 1)), (r(3, 4),)),
    ("block_diag", torch.block_diag, (r(2, 2), r(1, 3))),
    ("linalg.vander", lambda x: torch.linalg.vander(x, N=4), (r(5),)),
    ("gather_idx", lambda x, i: x.gather(1, i), (r(3, 5), idx(5, 3, 2))),
    ("meshgrid_xy", lambda a, b, c: torch.meshgrid(a, b, c, indexing="xy"), (r(3), r(4), r(2))),
    ("cartesian_prod", torch.cartesian_prod, (r(3), r(2))),
    ("diff_prepend", lambda x, p: torch.diff(x, dim=0, prepend=p), (r(3, 4), r(2, 4))),
    ("special.psi", torch.special.psi, (pos(5),)),
    ("special.logsumexp", lambda x: torch.special.logsumexp(x, 1), (r(3, 4),)),
    ("lp_pool2d", lambda x: F.lp_pool2d(x, 2, 3, 2), (r(2, 3, 7, 6),)),
    ("lp_pool1d_inf", lambda x: F.lp_pool1d(x, float("inf"), 2), (r(2, 3, 8),)),
    ("F.leaky_relu_", lambda x: F.leaky_relu_(x * 1, 0.3), (r(3, 4),)),
    ("F.hardtanh_", lambda x: F.hardtanh_(x * 2), (r(3, 4),)),
    ("frexp", torch.frexp, (r(3, 4) * 40,)),
    ("nextafter", torch.nextafter, (r(3, 4), r(4))),
    ("mode", lambda x: torch.mode(torch.round(x * 2), 1), (r(3, 6),)),
    ("gradient", lambda x: torch.gradient(x, spacing=[0.5, 2.0], edge_order=2), (r(4, 5),)),
    (
        "gradient_coordinates",
        lambda x, c: torch.gradient(x, spacing=(c,), dim=1),
        (r(3, 5), torch.tensor([0.0, 0.3, 1.0, 1.2, 2.5], dtype=torch.float64)),
    ),
    (
        "repeat_interleave_tensor",
        lambda x: torch.repeat_interleave(x, torch.tensor([2, 0, 1]), dim=0),
        (r(3, 2),),
    ),
    (
        "conv_transpose1d",
        lambda x, w: F.conv_transpose1d(x, w, stride=2, padding=1, output_padding=1),
        (r(2, 4, 7), r(4, 3, 3)),
    ),
    (
        "conv_transpose1d_groups_dilation",
        lambda x, w: F.conv_transpose1d(x, w, stride=3, padding=2, groups=2, dilation=2),
        (r(2, 4, 7), r(4, 3, 3, seed=1)),
    ),
    (
        "conv_transpose2d_padding_beyond_kernel",
        lambda x, w: F.conv_transpose2d(x, w, padding=3),
        (r(2, 4, 5, 6), r(4, 2, 3, 2)),
    ),
    (
        "conv_transpose3d",
        lambda x, w: F.conv_transpose3d(x, w, stride=2, output_padding=1),
        (r(1, 2, 3, 4, 3), r(2, 2, 2, 2, 2)),
    ),
    (
        "adaptive_max_pool2d_ties",
        lambda x: F.adaptive_max_pool2d(torch.round(x * 2), (3, 4), return_indices=True),
        (r(2, 3, 5, 7),),
    ),
    ("adaptive_max_pool1d", lambda x: F.adaptive_max_pool1d(x, 3), (r(2, 3, 7),)),
    ("adaptive_max_pool3d", lambda x: F.adaptive_max_pool3d(x, (2, 3, 2)), (r(1, 2, 4, 5, 3),)),
    (
        "max_unpool2d",
        lambda x, i: F.max_unpool2d(x, i, 2, output_size=(5, 6)),
        F.max_pool2d(r(2, 3, 5, 6), 2, return_indices=True),
    ),
]
