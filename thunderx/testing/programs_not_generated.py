"""Primitives the random programs (thunderx/testing/programs.py) do not reach, each with the
reason and where it is tested instead (tests/test_properties.py checks the list is exact)."""

from thunderx.testing.program_composites import FORWARD_ONLY

_MATRIX_REASON = (
    "a matrix decomposition: its derivative needs well-conditioned square inputs (distinct "
    "eigen/singular values) that random programs do not guarantee; see tests/test_linalg.py"
)
# Primitives no step reaches, and why.
NOT_GENERATED = {
    "random_uniform": "random: eager and traced runs draw different numbers; see test_properties",
    "random_normal": "random: eager and traced runs draw different numbers; see test_properties",
    "jit_call": "a nested jit is staged by jit composition tests (torch.func cannot run it)",
    "custom_vjp_call": "user-defined rules: tested by the custom_vjp tests",
    "custom_lin": "exists only in reverse mode of custom_vjp; tested there",
    "name": "checkpoint_name's identity tag: tests/test_jax_api_extras.py",
    "custom_vmap_call": "user-defined batching rules: tests/test_custom_vmap.py",
    "pure_callback": "a user's Python callback: tests/test_pure_callback.py",
    "linear_solve": "custom_linear_solve / custom_root with the user's solvers: "
    "tests/test_implicit.py",
    "torch_call": "the opaque fallback has no derivative or batching rule to fuzz",
    **dict.fromkeys(
        ("rnn", "rnn_jvp", "rnn_backward"),
        "a recurrent layer over a sequence (weights shaped by its gates): samples in "
        "tests/samples_composite.py, the differential op table (lstm, gru) and "
        "tests/test_models.py",
    ),
    "device_put": "a move between devices (random programs run on one device): samples in "
    "tests/samples.py, meta-device traces in tests/test_devices.py, CUDA in tests/test_cuda.py",
    **{
        n: "complex values (the random programs are real): tests/test_complex.py"
        for n in ("real", "imag", "conj", "complex", "fft")
    },
    "no_grad": "no_grad stops reverse mode only: forward and reverse derivatives differ by design "
    "(check_grads compares them); checked against torch.func in tests/test_semantics.py",
    **{
        name: "a collective over named axes: needs vmap(axis_name=) or shard_map, which torch.func "
        "programs do not have; see tests/test_distributed.py"
        for name in ("psum", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute")
        + ("all_to_all", "axis_index", "shard_slice", "shard_gather")
    },
    "conv_kernel_grad": "the kernel cotangent: random programs hold conv weights constant; "
    "see tests/test_conv.py",
    "scatter_reduce": "ties and zeros: the differential op table (index_reduce_amax/prod) and "
    "tests/test_scatter_reduce.py check it against torch.autograd and torch.func",
    "debug_callback": "no outputs to compare (thunderx.debug): torch.func cannot run it",
    "batch_norm_stats": "training-mode running statistics, written into buffers in place (no "
    "output to compare, no derivative): tests/test_jit_buffer_mutation.py checks the buffers "
    "against eager torch, and the op_db batch_norm entries run it",
    # torch.func (the oracle here) cannot run torch.cond / while_loop / scan, and checkpoint is
    # thunderx's own API: tests/test_control_flow.py checks them against Python loops
    "cond": "control flow: torch.func cannot run torch.cond; see tests/test_control_flow.py",
    "scan": "control flow: torch.func cannot run torch's scan; see tests/test_control_flow.py",
    "while": "control flow: torch.func cannot run torch's while_loop; see test_control_flow.py",
    "checkpoint": "thunderx.checkpoint has no torch counterpart; see tests/test_control_flow.py",
    **FORWARD_ONLY,  # log_softmax_jvp, max_pool_gather
    "cholesky": _MATRIX_REASON,
    "eigh": _MATRIX_REASON,
    "eig": _MATRIX_REASON,
    "expm": _MATRIX_REASON,
    "expm_frechet": _MATRIX_REASON,
    "lu": _MATRIX_REASON,
    "lu_pivots_to_permutation": _MATRIX_REASON,
    "qr": _MATRIX_REASON,
    "svd": _MATRIX_REASON,
    "triangular_solve": _MATRIX_REASON,
    **dict.fromkeys(
        ("upsample", "upsample_backward", "im2col", "col2im"),
        "image ops need (N, C, *spatial) operands: torch's kernels vs their decomposition in "
        "tests/test_composite.py and tests/test_vision.py",
    ),
    **dict.fromkeys(["sdpa", "sdpa_jvp", "sdpa_backward"], "4-D q/k/v: test_composite_attention"),
    "nextafter": "torch's derivative is 0 where x == y (the value y itself), where finite "
    "differences see 1: the differential op table checks it against torch.func",
}
