"""In-place updates of captured tensors (module buffers) and of jit's arguments under `jit`:
written back into the tensors after each call, as torch.compile does, so that repeated calls
match eager torch (oracle: an identical deep-copied module run eagerly, torch.autograd for
gradients). Writes that cannot be sound are clear errors: tests/test_captured_write_refusals.py."""

import copy

import pytest
import torch
import torch.nn.functional as F

import thunderx as tx
from thunderx.executors import executor_names
from thunderx.lang.inplace import MutationError
from thunderx.primitives import composite_channel_norm as KC


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def bn_model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "1d":
        return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Tanh())
    return torch.nn.Sequential(
        torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.ReLU(), torch.nn.Flatten()
    )


def bn_input(kind: str) -> torch.Tensor:
    return torch.randn(6, 4) if kind == "1d" else torch.randn(5, 2, 6, 6)


def same_state(model, ref):
    for (name, a), (_, b) in zip(model.named_buffers(), ref.named_buffers()):
        if a.dtype.is_floating_point:
            close(a, b)
        else:
            assert torch.equal(a, b), name


@pytest.mark.parametrize("executor", executor_names())
@pytest.mark.parametrize("kind", ["1d", "2d"])
def test_batchnorm_training_under_jit_updates_buffers_like_eager(kind, executor):
    model = bn_model(kind).train()
    ref = copy.deepcopy(model)
    step = tx.jit(model, executor=executor)
    for _ in range(3):
        x = bn_input(kind)
        close(step(x), ref(x))
        same_state(model, ref)  # running_mean, running_var, num_batches_tracked
    assert model[1].num_batches_tracked.item() == 3
    # eval mode reads the written statistics (a new signature: the mode is Python state)
    model.eval(), ref.eval()
    x = bn_input(kind)
    close(tx.jit(model, executor=executor)(x), ref(x))


@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_stats_are_the_mean_and_unbiased_variance(shape):
    x = torch.randn(shape, dtype=torch.float64)
    dims = tuple(d for d in range(x.ndim) if d != 1)
    var, mean = torch.var_mean(x, dims, correction=1)
    got = KC.batch_norm_stats(x)
    close(got[0], mean), close(got[1], var)
    close(tx.jit(KC.batch_norm_stats)(x)[1], var)
    xs = torch.stack([x, 2 * x + 1])
    got = tx.vmap(KC.batch_norm_stats)(xs)
    close(got[0], torch.stack([mean, 2 * mean + 1])), close(got[1], torch.stack([var, 4 * var]))


class Tracker(torch.nn.Module):
    """A module with hand-written buffer updates (a counter and an exponential average)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.register_buffer("ema", torch.zeros(3))
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        self.count.add_(1)
        self.ema.mul_(0.9).add_(x.mean(0), alpha=0.1)
        self.ema[0] = self.ema[0] * 2  # a write through indexing
        return self.lin(x) + self.ema  # reads the value just written


def test_custom_buffer_updates_are_written_back_each_call():
    torch.manual_seed(1)
    model = Tracker()
    ref = copy.deepcopy(model)
    step = tx.jit(model)
    for _ in range(4):
        x = torch.randn(5, 3)
        with torch.no_grad():
            want = ref(x)
        close(step(x), want)
        same_state(model, ref)
    assert model.count.item() == 4
    # each call reads the buffer's current value, not a snapshot taken when it was traced
    model.ema.fill_(10.0), ref.ema.fill_(10.0)
    x = torch.randn(5, 3)
    with torch.no_grad():
        close(step(x), ref(x))
    same_state(model, ref)
    assert step.cache_info()["misses"] == 1


def test_nested_jit_writes_reach_the_outer_program():
    buf, ref_buf = torch.zeros(3), torch.zeros(3)

    @tx.jit
    def inner(x):
        buf.mul_(0.5).add_(x)
        return x * 2

    def ref(x):
        ref_buf.mul_(0.5).add_(x)
        return x * 2 + ref_buf

    outer = tx.jit(lambda x: inner(x) + buf)  # reads the value the inner program wrote
    for k in range(3):
        x = torch.full((3,), k + 1.0)
        close(outer(x), ref(x))
        close(buf, ref_buf)
    close(inner(x), x * 2)  # the inner function alone, at top level
    ref(x)
    close(buf, ref_buf)


def test_the_writeback_is_visible_in_the_ir():
    buf = torch.zeros(3)

    def f(x):
        buf.mul_(0.5).add_(x)
        return x * 2

    text = str(tx.make_jaxpr(f)(torch.ones(3)))
    assert "writes back: a <- " in text, text  # `a` is the captured buffer, the first const
    lowered = tx.jit(f).lower(torch.ones(3)).as_text()
    assert "written back in place" in lowered and ".copy_(out 1)" in lowered, lowered
    assert torch.equal(buf, torch.zeros(3))  # tracing and lowering wrote nothing
    c = tx.jit(f).lower(torch.ones(3)).compile()
    c(torch.ones(3))
    c(torch.ones(3))
    close(buf, torch.full((3,), 1.5))  # (0 * .5 + 1) * .5 + 1


def test_tensors_made_inside_the_function_stay_trace_time_values():
    def f(x):
        t = torch.zeros(3)
        t[0] = 5.0
        t.add_(1)
        return x * t.sum().item()  # concrete while tracing, as before

    close(tx.jit(f)(torch.ones(3)), torch.full((3,), 8.0))


def test_writes_through_data_and_detach_aliases_reach_the_buffer():
    ema, count = torch.zeros(3), torch.zeros(3)

    def f(x, ema, count):
        ema.data.mul_(0.5).add_(x.detach().data)  # old-style EMA code
        count.detach().add_(1.0)
        return x * 2

    step = tx.jit(lambda x: f(x, ema, count))
    ref_ema, ref_count = ema.clone(), count.clone()
    for _ in range(3):
        x = torch.randn(3)
        close(step(x), f(x, ref_ema, ref_count))
        close(ema, ref_ema), close(count, ref_count)


def test_writes_jit_cannot_order_or_express_are_refused():
    buf = torch.zeros(3)

    def read_after_alias_write(x):
        buf.data.mul_(0.5)  # an alias object: the read of `buf` below would not see it
        return x + buf

    with pytest.raises(MutationError, match="shares memory"):
        tx.jit(read_after_alias_write)(torch.ones(3))
    with pytest.raises(MutationError, match="changes the shape"):
        tx.jit(lambda x: (buf.unsqueeze_(0), x)[1])(torch.ones(3))
    assert buf.shape == (3,) and torch.equal(buf, torch.zeros(3))


def test_jit_arguments_written_in_place_are_updated_like_eager():
    x = torch.randn(4, 3, 5, dtype=torch.float64)
    rm, rv = torch.zeros(3, dtype=x.dtype), torch.ones(3, dtype=x.dtype)
    rm2, rv2 = rm.clone(), rv.clone()

    def f(x, rm, rv):
        return F.batch_norm(x, rm, rv, training=True, momentum=0.3)

    step = tx.jit(f)
    for _ in range(2):
        close(step(x, rm, rv), f(x, rm2, rv2))
        close(rm, rm2), close(rv, rv2)

    def double(y):
        y.mul_(2)
        return y.sum()

    y = torch.ones(3)
    assert tx.jit(double)(y).item() == 6.0
    close(y, torch.full((3,), 2.0))


@pytest.mark.parametrize("wrap", ["vmap", "jit(vmap)"])
@pytest.mark.parametrize("axis", [0, 1])
def test_batched_arguments_written_in_place_are_updated_like_a_loop(wrap, axis):
    # one set of running statistics per example, as vmap's arguments (torch.func.vmap writes
    # them too; with the batch on dim 1 it updates them wrongly in torch 2.13, so the oracle is
    # a loop over the examples)
    torch.manual_seed(2)
    x = torch.randn(2, 4, 3, 5, dtype=torch.float64)
    rm = torch.randn(3, 2, dtype=x.dtype).movedim(1, axis).contiguous()
    rv = torch.rand(3, 2, dtype=x.dtype).movedim(1, axis).contiguous() + 0.5
    want_m, want_v = rm.clone(), rv.clone()

    def f(x, rm, rv):
        return F.batch_norm(x, rm, rv, training=True, momentum=0.3)

    step = tx.vmap(f, in_axes=(0, axis, axis))
    step = tx.jit(step) if wrap == "jit(vmap)" else step
    got = step(x, rm, rv)
    for k in range(2):
        m, v = want_m.select(axis, k), want_v.select(axis, k)  # views: written in place
        close(got[k], f(x[k], m, v))
    close(rm, want_m), close(rv, want_v)


def _train_loss(model):
    def loss(params, x, y):
        return F.cross_entropy(tx.functional_call(model, params, (x,)), y)

    return loss


@pytest.mark.parametrize("wrap", ["jit(grad)", "grad(jit)", "grad"])
def test_training_step_gradients_and_running_stats_match_autograd(wrap):
    model = torch.nn.Sequential(bn_model("2d"), torch.nn.Linear(48, 2)).train()
    ref = copy.deepcopy(model)
    loss = _train_loss(model)
    step = {
        "jit(grad)": tx.jit(tx.grad(loss)),
        "grad(jit)": tx.grad(tx.jit(loss)),
        "grad": tx.grad(loss),
    }[wrap]
    params = {k: v.detach() for k, v in model.named_parameters()}
    for _ in range(3):
        x, y = torch.randn(5, 2, 6, 6), torch.randint(0, 2, (5,))
        got = step(params, x, y)
        # torch.func.grad refuses BatchNorm's num_batches_tracked.add_ on a captured buffer,
        # so the oracle is eager torch with torch.autograd: one update per step
        ps = dict(ref.named_parameters())
        want = torch.autograd.grad(F.cross_entropy(ref(x), y), list(ps.values()))
        for k, w in zip(ps, want):
            close(got[k], w)
        same_state(model, ref)
    assert model[0][1].num_batches_tracked.item() == 3


def test_a_derivative_reads_the_value_before_a_later_write():
    # d/dx sum(x * w) is the w read, not the w written afterwards (torch.autograd's version
    # counter would refuse the eager form; the functional answer is the read value)
    def captured_case():
        buf = torch.full((3,), 2.0)

        def f(x):
            y = (x * buf).sum()
            with torch.no_grad():
                buf.add_(1.0)
            return y

        return f, buf

    f, buf = captured_case()
    step = tx.jit(tx.grad(f))
    for k in range(3):
        got = step(torch.ones(3))
        close(got, torch.full((3,), 2.0 + k))  # the output is not the buffer written after it
        close(buf, torch.full((3,), 3.0 + k))

    def argument_case(x, w):
        y = (x * w).sum()
        w.add_(1.0)
        return y

    w = torch.full((3,), 2.0)
    close(tx.jit(tx.grad(argument_case))(torch.ones(3), w), torch.full((3,), 2.0))
    close(w, torch.full((3,), 3.0))

    def local_case(x):
        t = torch.full((3,), 2.0)
        y = (x * t).sum()
        t.add_(1.0)
        return y

    close(tx.jit(tx.grad(local_case))(torch.ones(3)), torch.full((3,), 2.0))


def test_torch_autograd_through_jit_leaves_buffers_out_of_the_graph():
    model = bn_model("2d").train()
    ref = copy.deepcopy(model)
    step = tx.jit(model)
    for _ in range(2):  # a second backward would fail if a buffer held the first graph
        x = bn_input("2d")
        step(x).pow(2).sum().backward()
        ref(x).pow(2).sum().backward()
        same_state(model, ref)
        assert model[1].running_mean.grad_fn is None
    close(model[0].weight.grad, ref[0].weight.grad)


def test_parameter_update_in_no_grad_block_under_jit():
    p = torch.nn.Parameter(torch.ones(3))
    q = torch.nn.Parameter(torch.ones(3))

    def ema(x, p):
        with torch.no_grad():
            p.mul_(0.5).add_(x, alpha=0.5)
        return x

    step = tx.jit(lambda x: ema(x, p))
    for _ in range(2):
        x = torch.randn(3)
        step(x), ema(x, q)
        close(p.detach(), q.detach())
    assert p.is_leaf and p.requires_grad and p.grad_fn is None


@pytest.mark.parametrize("executor", executor_names())
@pytest.mark.parametrize("cls", [torch.nn.BatchNorm1d, torch.nn.BatchNorm2d])
def test_batchnorm_cumulative_average_under_jit_is_eagers(cls, executor):
    # momentum=None: torch averages with the factor 1 / float(num_batches_tracked), taken after
    # the count's increment; under jit the factor is traced with the count
    model = cls(3, momentum=None).train()
    ref = copy.deepcopy(model)
    step = tx.jit(model, executor=executor)
    g = torch.Generator().manual_seed(0)
    shape = (6, 3) if cls is torch.nn.BatchNorm1d else (4, 3, 2, 2)
    for i in range(4):
        x = torch.randn(*shape, generator=g) + i
        close(step(x), ref(x))
        same_state(model, ref)
    assert model.num_batches_tracked.item() == 4
    # the same module called twice in one traced function counts both calls
    twice, ref2 = copy.deepcopy(ref), copy.deepcopy(ref)
    x = torch.randn(*shape, generator=g)
    close(tx.jit(lambda x: twice(twice(x)), executor=executor)(x), ref2(ref2(x)))
    same_state(twice, ref2)
    # the eager transforms see the count's value (torch.func refuses the write; autograd is
    # the oracle)
    grad_model, grad_ref = copy.deepcopy(ref), copy.deepcopy(ref)
    gx = tx.grad(lambda x: grad_model(x).square().sum())(x)
    xr = x.clone().requires_grad_()
    close(gx, torch.autograd.grad(grad_ref(xr).square().sum(), xr)[0])
    same_state(grad_model, grad_ref)


def test_programs_that_write_back_take_the_fast_path_with_every_check():
    # a cache hit of a program writing into a buffer and into an argument: the fast path writes
    # back like the general path, refuses an argument aliasing the written buffer, and serves
    # torch autograd
    buf = torch.zeros(3)

    def f(x, acc):
        buf.add_(x.detach().sum(0))
        acc.mul_(2)
        return (x * buf).sum(0), acc + 1

    j = tx.jit(f)
    ref_buf, x = torch.zeros(3), torch.randn(4, 3)
    acc, ref_acc = torch.ones(3), torch.ones(3)
    hits = j.jit_function._fast_hits
    for _ in range(3):
        ref_buf.add_(x.sum(0))
        ref_acc.mul_(2)
        got = j(x, acc)
        close(got[0], (x * ref_buf).sum(0))
        close(got[1], ref_acc + 1)
        close(buf, ref_buf)
        close(acc, ref_acc)
    assert hits[0] == 2
    with pytest.raises(MutationError, match="shares memory"):
        j(x, buf)  # the argument written in place is the captured buffer itself
    xr = x.clone().requires_grad_()
    (gx,) = torch.autograd.grad(j(xr, acc)[0].sum(), xr)
    ref_buf.add_(x.sum(0))
    close(gx, ref_buf.expand(4, 3))
    close(buf, ref_buf)


@pytest.mark.parametrize("executor", executor_names())
def test_detach_and_no_grad_inside_jit_hold_under_torch_autograd(executor):
    # the program torch autograd runs through keeps `.detach()` and no_grad blocks (they are
    # identities for thunderx's own transforms): the gradient is eager torch's
    def f(x):
        with torch.no_grad():
            s = x * 3
        return x * x.detach() + torch.sin(x).detach() * x + x * s

    x = torch.randn(5, dtype=torch.float64)
    xr, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    j = tx.jit(f, executor=executor)
    (got,) = torch.autograd.grad(j(xr).sum(), xr)
    (want,) = torch.autograd.grad(f(xe).sum(), xe)
    close(got, want)
    close(tx.grad(lambda x: f(x).sum())(x), want)  # thunderx's own grad agrees
