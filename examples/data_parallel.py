"""Data-parallel training of a NumPy logistic regression, gradients summed with all_reduce.

Run it with:  meshcast run -n 4 examples/data_parallel.py

The recipe every data-parallel trainer (DDP, Horovod) follows:

1. every rank starts from the same parameters (rank 0's, sent with broadcast);
2. every rank computes the gradient on its own shard of the data;
3. one all_reduce sums the gradients, so every rank applies the same update
   and the parameters stay identical without ever being sent again.

The shards need not be equal (1000 examples over 3 ranks is 334 + 333 + 333),
so instead of averaging per-rank mean gradients (``ReduceOp.AVG``, exact only
for equal shards) each rank sends its gradient *sum*, its loss sum and its
example count in one buffer, and one all_reduce(SUM) of that buffer gives the
exact full-batch gradient. The result is then the same for any number of
ranks: the example checks it against plain single-process training on the
whole data set, and checks that all ranks hold bitwise identical parameters.
"""

import numpy as np

import meshcast as dist

N, D = 1000, 8  # examples, features
EPOCHS, LR = 60, 0.5


def show(title, x):
    """Print every rank's copy of ``x`` on rank 0, one line per rank."""
    rank, size = dist.get_rank(), dist.get_world_size()
    x = np.asarray(x)
    pieces = [np.empty_like(x) for _ in range(size)] if rank == 0 else None
    dist.gather(x, pieces, dst=0)
    if rank == 0:
        print(f"  {title}")
        for r, p in enumerate(pieces):
            print(f"    rank {r}: {np.array2string(p, precision=4, suppress_small=True)}")


def step(name):
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"\n== {name}")


def make_data():
    """The whole data set (every rank makes the same one; a real job reads its shard)."""
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((N, D))
    w_true = rng.standard_normal(D) * 2
    y = (x @ w_true + 0.5 * rng.standard_normal(N) > 0).astype(np.float64)
    return x, y


def loss_and_grad_sums(params, x, y):
    """Sums over the examples of x, y: (gradient of the log loss [w..., b], loss)."""
    w, b = params[:-1], params[-1]
    z = x @ w + b
    p = 1 / (1 + np.exp(-z))
    loss = np.sum(np.logaddexp(0, z) - y * z)  # -log-likelihood, computed stably
    err = p - y
    return np.append(x.T @ err, err.sum()), loss


def train_step(params, x, y):
    """One data-parallel step: local sums -> all_reduce(SUM) -> identical update everywhere."""
    grad, loss = loss_and_grad_sums(params, x, y)
    buf = np.concatenate([grad, [loss, len(y)]])  # one message instead of three
    dist.all_reduce(buf, op=dist.ReduceOp.SUM)
    count = buf[-1]
    params -= LR * buf[:-2] / count
    return buf[-2] / count  # mean loss over the whole data set (before the update)


def main():
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    x_all, y_all = make_data()
    mine = np.array_split(np.arange(N), size)[rank]  # this rank's shard
    x, y = x_all[mine], y_all[mine]
    if rank == 0:
        print(f"meshcast data parallel: logistic regression, {N} examples x {D} features, "
              f"{size} ranks")

    step("1. same start: rank 0's random parameters, broadcast to everyone")
    params = np.random.default_rng(rank).standard_normal(D + 1) * 0.1  # differs per rank
    show("before broadcast: params[:4]", params[:4])
    dist.broadcast(params, src=0)
    show("after broadcast:  params[:4]", params[:4])
    start = params.copy()

    step(f"2. train {EPOCHS} full-batch steps, each rank on its own shard")
    _, local0 = loss_and_grad_sums(params, x, y)
    show("examples in my shard", np.array([len(y)]))
    show("before: my shard's mean loss", np.array([local0 / len(y)]))
    losses = []
    for epoch in range(EPOCHS):
        losses.append(train_step(params, x, y))
        if rank == 0 and (epoch % 10 == 0 or epoch == EPOCHS - 1):
            print(f"  epoch {epoch:3d}  global loss {losses[-1]:.4f}")
    _, local1 = loss_and_grad_sums(params, x, y)
    show("after: my shard's mean loss", np.array([local1 / len(y)]))

    step("3. every rank holds the same parameters")
    show("params[:4] and b", np.append(params[:4], params[-1]))
    everyone = np.zeros((size, D + 1))
    dist.all_gather_into_tensor(everyone, params)
    assert all(np.array_equal(p, params) for p in everyone), "ranks disagree"

    # The same training in one process on the whole data set must give the same model.
    ref = start.copy()
    for _ in range(EPOCHS):
        g, _ = loss_and_grad_sums(ref, x_all, y_all)
        ref -= LR * g / N
    assert np.allclose(params, ref, rtol=1e-9, atol=1e-12), (params, ref)
    assert losses[-1] < 0.5 * losses[0], losses
    accuracy = np.mean(((x_all @ params[:-1] + params[-1]) > 0) == y_all)
    if rank == 0:
        print(f"  identical on all ranks, equal to single-process training; "
              f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, accuracy {accuracy:.1%}")
        print("\ndata parallel OK")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
