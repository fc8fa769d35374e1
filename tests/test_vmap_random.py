"""Random ops under eager vmap against torch.func itself: with the same seed (or the same
generator state) thunderx draws torch.func's numbers, and misuse raises torch.func's errors."""

import pytest
import torch
import torch.func as tf
import torch.nn.functional as F

import thunderx as tx

B = 4
SEED = 1234567


def image(where):
    return {
        "first": torch.ones(B, 3, 5),
        "last": torch.ones(3, 5, B),
        "none": torch.ones(3, 5),
    }[where]


def in_dim(where):
    return {"first": 0, "last": -1, "none": None}[where]


def both(fn, args, in_dims, randomness, use_generator):
    """(torch.func's outcome, thunderx's): a tensor or the error, each from the same RNG state
    and from fresh copies of the inputs (in-place draws write into them)."""
    outcomes = []
    for vmap in (tf.vmap, tx.vmap):
        gen = torch.Generator().manual_seed(SEED)
        torch.manual_seed(SEED)
        copies = [a.clone() for a in args]
        try:
            # a batched dummy argument (unused), as torch's tests pass one: vmap needs one
            f = lambda *a: fn(*a[:-1], gen if use_generator else None)  # noqa: E731
            dims = tuple(in_dims) + (0,)
            out = vmap(f, in_dims=dims, randomness=randomness)(*copies, torch.zeros(B))
            outcomes.append((out, copies))
        except RuntimeError as e:
            outcomes.append(e)
    return outcomes


def assert_same_outcome(fn, args, in_dims, randomness, use_generator=False):
    ref, got = both(fn, args, in_dims, randomness, use_generator)
    if isinstance(ref, Exception):
        assert isinstance(got, RuntimeError), f"torch.func raised {ref!r}, thunderx gave {got!r}"
        # torch.func's phrase is in thunderx's message
        key = str(ref).split(".")[0].replace("vmap: ", "")
        assert key in str(got), (str(ref), str(got))
        return
    assert not isinstance(got, Exception), f"thunderx raised {got!r}, torch.func did not"
    (rout, rargs), (gout, gargs) = ref, got
    torch.testing.assert_close(gout, rout, rtol=0, atol=0)
    for r, g in zip(rargs, gargs):  # in-place draws reach the caller's tensors alike
        torch.testing.assert_close(g, r, rtol=0, atol=0)


MODES = ["different", "same", "error"]
WHERE = ["first", "last", "none"]

FACTORIES = {
    "rand": lambda g: torch.rand(3, 3, generator=g),
    "randn": lambda g: torch.randn(3, 3, generator=g),
    "randint": lambda g: torch.randint(5, 100, (3, 3), generator=g),
    "normal_size": lambda g: torch.normal(0.0, 1.0, (3, 3), generator=g),
    "randperm": lambda g: torch.randperm(10, generator=g),
}


@pytest.mark.parametrize("randomness", MODES)
@pytest.mark.parametrize("use_generator", [False, True])
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories(name, use_generator, randomness):
    op = FACTORIES[name]
    assert_same_outcome(lambda g: op(g), [], (), randomness, use_generator)


UNARY = {
    "normal_std": lambda t, g: torch.normal(0.0, t.abs(), generator=g),
    "normal_mean": lambda t, g: torch.normal(t, 1.0, generator=g),
    "bernoulli": lambda t, g: torch.bernoulli(t - 0.5, generator=g),
    "bernoulli_p": lambda t, g: torch.bernoulli(t, 0.3, generator=g),
    "poisson": lambda t, g: torch.poisson(t, generator=g),
    "binomial": lambda t, g: torch.binomial(t * 5, t - 0.5, generator=g),
    "standard_gamma": lambda t, g: torch._standard_gamma(t, generator=g),
    "multinomial": lambda t, g: torch.multinomial(t, 4, generator=g),
    "rand_like": lambda t, g: torch.rand_like(t),
    "randn_like": lambda t, g: torch.randn_like(t),
    "randint_like": lambda t, g: torch.randint_like(t, 3, 20),
}


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("randomness", MODES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_out_of_place(name, randomness, where):
    op = UNARY[name]
    assert_same_outcome(op, [image(where)], (in_dim(where),), randomness, use_generator=True)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("randomness", MODES)
def test_rrelu_training(randomness, where):
    # torch.func refuses rrelu under vmap; thunderx runs torch's kernel as for the other ops
    x = image(where) - 1.5
    d = in_dim(where)
    fn = lambda t, _: F.rrelu(t, training=True)  # noqa: E731
    vm = tx.vmap(fn, in_dims=(d, 0), randomness=randomness)
    if randomness == "error":
        with pytest.raises(RuntimeError, match="randomness error mode"):
            vm(x, torch.zeros(B))
        return
    if randomness == "same" and where != "none":
        with pytest.raises(RuntimeError, match="same randomness with a batched tensor"):
            vm(x, torch.zeros(B))
        return
    torch.manual_seed(SEED)
    got = vm(x, torch.zeros(B))
    torch.manual_seed(SEED)
    t = x if d is None else torch.movedim(x, d, 0)
    if randomness == "different":
        want = F.rrelu(t.expand(B, *t.shape) if d is None else t, training=True)
    else:
        want = F.rrelu(t, training=True).expand(B, *t.shape)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert (got[0] != got[1]).any() if randomness == "different" else (got[0] == got[1]).all()


INPLACE = {
    "random_": lambda t, g: t.random_(generator=g),
    "random_to": lambda t, g: t.random_(100, generator=g),
    "random_from_to": lambda t, g: t.random_(-5, 100, generator=g),
    "normal_": lambda t, g: t.normal_(generator=g),
    "bernoulli_": lambda t, g: t.bernoulli_(generator=g),
    "cauchy_": lambda t, g: t.cauchy_(generator=g),
    "exponential_": lambda t, g: t.exponential_(generator=g),
    "geometric_": lambda t, g: t.geometric_(0.5, generator=g),
    "log_normal_": lambda t, g: t.log_normal_(generator=g),
    "uniform_": lambda t, g: t.uniform_(generator=g),
}


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("randomness", MODES)
@pytest.mark.parametrize("name", sorted(INPLACE))
def test_in_place(name, randomness, where):
    assert_same_outcome(INPLACE[name], [image(where)], (in_dim(where),), randomness, True)


@pytest.mark.parametrize("p_where", WHERE)
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("randomness", MODES)
def test_bernoulli_in_place_with_a_tensor_p(randomness, where, p_where):
    op = lambda t, p, g: t.bernoulli_(p, generator=g)  # noqa: E731
    args = [image(where), image(p_where) - 0.5]
    assert_same_outcome(op, args, (in_dim(where), in_dim(p_where)), randomness, True)


@pytest.mark.parametrize("o_where", WHERE)
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("randomness", MODES)
def test_normal_of_two_tensors(randomness, where, o_where):
    op = lambda t, o, g: torch.normal(t, o, generator=g)  # noqa: E731
    args = [image(where), image(o_where)]
    assert_same_outcome(op, args, (in_dim(where), in_dim(o_where)), randomness, True)


DROPOUTS = {
    "dropout": lambda x, g: F.dropout(x, 0.3, training=True),
    "dropout_module": lambda x, g: torch.nn.Dropout(0.6)(x),
    "dropout1d": lambda x, g: F.dropout1d(x, 0.3, training=True),
    "dropout2d": lambda x, g: F.dropout2d(x[None], 0.3, training=True),
    "alpha_dropout": lambda x, g: F.alpha_dropout(x, 0.3, training=True),
    "feature_alpha_dropout": lambda x, g: F.feature_alpha_dropout(x[None], 0.3, True),
}


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("randomness", MODES)
@pytest.mark.parametrize("name", sorted(DROPOUTS))
def test_dropouts(name, randomness, where):
    # torch.func draws the batch's noise at once, batch first (`empty(B, ...).bernoulli_`), for
    # a batched input and an unbatched one alike
    assert_same_outcome(DROPOUTS[name], [image(where)], (in_dim(where),), randomness)


@pytest.mark.parametrize("outer", ["different", "same"])
@pytest.mark.parametrize("inner", ["different", "same"])
def test_nested_vmaps_of_dropout(outer, inner):
    def run(vmap):
        torch.manual_seed(SEED)
        fn = vmap(lambda v: F.dropout(v, 0.4), randomness=inner)
        return vmap(fn, randomness=outer)(torch.ones(3, 4, 10))

    torch.testing.assert_close(run(tx.vmap), run(tf.vmap), rtol=0, atol=0)


W = torch.linspace(-1, 1, 30, dtype=torch.float64).reshape(10, 3)
XS = torch.linspace(-2, 2, 40, dtype=torch.float64).reshape(4, 10)
THROUGH_DERIVATIVES = {
    # per-example gradients of a loss with dropout (DP-SGD with dropout)
    "vmap(grad(dropout))": lambda lib: lib.vmap(
        lib.grad(lambda w, x: F.dropout(x @ w, 0.5).sum()),
        in_dims=(None, 0),
        randomness="different",
    )(W, XS),
    "vmap(grad(rand))": lambda lib: lib.vmap(
        lib.grad(lambda w, x: (torch.rand(3, dtype=torch.float64) * (x @ w)).sum()),
        in_dims=(None, 0),
        randomness="different",
    )(W, XS),
    "vmap(grad(randn)), same": lambda lib: lib.vmap(
        lib.grad(lambda w, x: (torch.randn(3, dtype=torch.float64) * (x @ w)).sum()),
        in_dims=(None, 0),
        randomness="same",
    )(W, XS),
    "grad(vmap(dropout))": lambda lib: lib.grad(
        lambda w: lib.vmap(lambda x: F.dropout(x @ w, 0.5).sum(), randomness="different")(XS).sum()
    )(W),
    "vmap(vjp(alpha_dropout))": lambda lib: lib.vmap(
        lambda x: lib.vjp(lambda w: F.alpha_dropout(x @ w, 0.3, True), W)[1](
            torch.ones(3, dtype=torch.float64)
        )[0],
        randomness="different",
    )(XS),
    "vmap(jvp(dropout))": lambda lib: lib.vmap(
        lambda x: lib.jvp(lambda w: F.dropout(x @ w, 0.3), (W,), (torch.ones_like(W),))[1],
        randomness="different",
    )(XS),
}


@pytest.mark.parametrize("name", sorted(THROUGH_DERIVATIVES))
def test_draws_through_eager_derivatives_are_torch_funcs(name):
    # a draw that reads no traced value is made at once for the batch, also where grad, vjp or
    # jvp lie between the vmap and the call: torch.func's numbers for the same seed
    outcomes = []
    for lib in (tf, tx):
        torch.manual_seed(SEED)
        outcomes.append(THROUGH_DERIVATIVES[name](lib))
    torch.testing.assert_close(outcomes[1], outcomes[0], rtol=0, atol=0)


def test_draws_under_jit_of_vmap_of_grad_keep_the_distribution():
    # staged: thunderx's own uniform draws (not torch.func's numbers), still a dropout mask
    fn = tx.jit(
        tx.vmap(
            tx.grad(lambda w, x: F.dropout(x @ w, 0.5).sum()),
            in_axes=(None, 0),
            randomness="different",
        )
    )
    g = fn(W, torch.ones(64, 10, dtype=torch.float64))
    mask = g[:, 0, :] / 2.0  # d/dw[0, j] = x[0] * mask_j / (1 - p) with x = 1
    assert set(mask.unique().tolist()) <= {0.0, 1.0}
    assert abs(mask.mean().item() - 0.5) < 0.15
    assert torch.equal(g, g[:, :1, :].expand_as(g))  # one mask entry per (example, column)


def test_nested_vmaps_draw_torch_funcs_block():
    def run(vmap):
        torch.manual_seed(SEED)
        inner = vmap(lambda _: torch.rand(2), randomness="different")
        return vmap(inner, randomness="different")(torch.ones(3, 4))

    torch.testing.assert_close(run(tx.vmap), run(tf.vmap), rtol=0, atol=0)


def test_out_variants_are_refused_under_vmap():
    y = torch.empty(3)
    with pytest.raises(RuntimeError, match="calling out variants"):
        tf.vmap(lambda x: torch.randn(3, out=y), randomness="same")(torch.ones(2))
    with pytest.raises(RuntimeError, match="calling out variants"):
        tx.vmap(lambda x: torch.randn(3, out=y), randomness="same")(torch.ones(2))


@pytest.mark.parametrize("randomness", ["different", "same"])
def test_in_place_draw_through_a_view_reaches_its_base(randomness):
    def f(v):
        y = v * 1
        z = y.view(-1)
        z.bernoulli_(0.5)
        return y, z

    outs = []
    for vmap in (tf.vmap, tx.vmap):
        torch.manual_seed(SEED)
        outs.append(vmap(f, randomness=randomness)(torch.ones(B, 2, 3)))
    (ry, rz), (gy, gz) = outs
    torch.testing.assert_close(gy, ry, rtol=0, atol=0)
    torch.testing.assert_close(gz, rz, rtol=0, atol=0)


def test_jacfwd_randomness_as_torch_func():
    x = torch.rand(3, 4)
    for jacfwd in (tf.jacfwd, tx.jacfwd):
        with pytest.raises(RuntimeError, match="randomness error mode"):
            jacfwd(torch.bernoulli)(x)
    for randomness in ("same", "different"):
        got = tx.jacfwd(torch.bernoulli, randomness=randomness)(x)
        torch.testing.assert_close(got, tf.jacfwd(torch.bernoulli, randomness=randomness)(x))

    # a random factor: 'same' shares one draw across the columns, 'different' draws per column
    def f(v):
        return v * torch.rand_like(v)

    v = torch.ones(3)
    for randomness in ("same", "different"):
        torch.manual_seed(SEED)
        got = tx.jacfwd(f, randomness=randomness)(v)
        torch.manual_seed(SEED)
        torch.testing.assert_close(got, tf.jacfwd(f, randomness=randomness)(v), rtol=0, atol=0)
    # deterministic functions are unaffected by the mode
    for randomness in ("error", "same", "different"):
        got = tx.jacfwd(torch.sin, randomness=randomness)(v)
        torch.testing.assert_close(got, tf.jacfwd(torch.sin)(v))


_NO_DRAW = {  # random functions called where torch draws nothing: identity or a constant factor
    "dropout eval": lambda x: F.dropout(x, 0.5, training=False),
    "dropout p=0": lambda x: F.dropout(x, 0.0, training=True),
    "dropout p=1": lambda x: F.dropout(x, 1.0, training=True),
    "alpha_dropout eval": lambda x: F.alpha_dropout(x, 0.5, training=False),
    "feature_alpha_dropout p=0": lambda x: F.feature_alpha_dropout(x, 0.0, training=True),
    "dropout2d eval": lambda x: F.dropout2d(x, 0.5, training=False),
    "nn.Dropout in eval mode": torch.nn.Dropout(0.3).eval(),
}


@pytest.mark.parametrize("name", sorted(_NO_DRAW))
def test_jacfwd_and_hessian_randomness_error_only_where_a_draw_is_made(name):
    # torch.func raises its randomness error when a random op draws, not when a random
    # function is called: a model in eval mode has a Jacobian and a Hessian under the default
    # randomness='error' (thunderx raised for every dropout call)
    f = _NO_DRAW[name]
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    torch.testing.assert_close(tx.jacfwd(f)(x), tf.jacfwd(f)(x))
    torch.testing.assert_close(tx.jit(tx.jacfwd(f))(x), tf.jacfwd(f)(x))

    def g(v):
        return (f(v) ** 3).sum()

    torch.testing.assert_close(tx.hessian(g)(x), tf.hessian(g)(x))


def test_jacfwd_randomness_error_names_the_drawing_call():
    x = torch.randn(3, 4)
    for f in (lambda v: F.dropout(v, 0.5), lambda v: F.dropout2d(v[None], 0.2)):
        for jacfwd in (tf.jacfwd, tx.jacfwd):
            with pytest.raises(RuntimeError, match="randomness error mode"):
                jacfwd(f)(x)
    with pytest.raises(RuntimeError, match="dropout called random operation"):
        tx.jacfwd(lambda v: F.dropout(v, 0.5))(x)
