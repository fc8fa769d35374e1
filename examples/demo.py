"""The demo: trace a small torch function, print its jaxpr, then grad / vmap / jit of it, each
checked against torch (autograd, torch.func, eager)."""

import torch

import thunderx as tx


def mlp_loss(params, x, y):
    w1, b1, w2, b2 = params
    h = torch.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    return torch.nn.functional.cross_entropy(logits, y)


def check(name, got, want):
    ok = all(
        torch.allclose(g, w, rtol=1e-4, atol=1e-5)
        for g, w in zip(tx.tree.leaves(got), tx.tree.leaves(want))
    )
    print(f"  {name:<42} {'matches' if ok else 'DIFFERS FROM'} torch")
    if not ok:
        raise SystemExit(f"{name} does not match torch")


def main():
    torch.manual_seed(0)
    params = (torch.randn(8, 16) * 0.3, torch.zeros(16), torch.randn(16, 4) * 0.3, torch.zeros(4))
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))

    print("1. The traced jaxpr of f(x) = sin(x).sum():")
    print(tx.make_jaxpr(lambda v: torch.sin(v).sum())(torch.ones(3)))

    print("\n2. grad of the loss; its jaxpr:")
    print(tx.make_jaxpr(tx.grad(lambda v: (torch.sin(v) * v).sum()))(torch.ones(3)))
    g = tx.grad(mlp_loss)(params, x, y)
    ps = [p.clone().requires_grad_() for p in params]
    want = torch.autograd.grad(mlp_loss(ps, x, y), ps)
    check("grad(mlp_loss) vs torch.autograd", g, want)

    print("\n3. Per-example gradients: jit(vmap(grad(loss), in_axes=(None, 0, 0)))")
    per_example = tx.jit(tx.vmap(tx.grad(mlp_loss), in_axes=(None, 0, 0)))
    got = per_example(params, x[:, None], y[:, None])
    want = torch.func.vmap(torch.func.grad(mlp_loss), in_dims=(None, 0, 0))(
        params, x[:, None], y[:, None]
    )
    check("jit(vmap(grad)) vs torch.func", got, want)
    print(per_example.lower(params, x[:, None], y[:, None]).as_text(max_lines=25))

    print("\n4. Hessian of x**y at (4, 0), symmetric:")
    print(tx.hessian(lambda v: v[0] ** v[1])(torch.tensor([4.0, 0.0], dtype=torch.float64)))

    print("\n5. Jacobians: jacrev vs jacfwd vs torch.func")
    A = torch.randn(5, 3)
    f = lambda v: torch.tanh(A @ v)  # noqa: E731
    v = torch.randn(3)
    check("jacrev(f)", tx.jacrev(f)(v), torch.func.jacrev(f)(v))
    check("jacfwd(f)", tx.jacfwd(f)(v), torch.func.jacfwd(f)(v))
    print("\nAll checks passed.")


if __name__ == "__main__":
    main()
