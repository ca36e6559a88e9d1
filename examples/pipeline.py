"""Pipeline (model) parallelism: each rank holds one layer; activations and gradients travel by send/recv.

Run it with:  meshcast run -n 4 examples/pipeline.py

A small MLP with one layer per rank (``tanh`` hidden layers, a linear output
layer on the last rank) learns a regression. No rank ever holds the whole
model. Each training step follows the GPipe schedule:

- forward: the batch is cut into micro-batches. Rank 0 computes its layer on
  micro-batch m and ``send``s the activations to rank 1, which ``recv``s
  them, applies its layer, and passes them on; the last rank computes the
  loss. While rank 1 works on micro-batch m, rank 0 is already on m+1.
- backward: in reverse. The last rank sends the gradient of the loss with
  respect to its input back to the previous rank, and so on down to rank 0.
  Each rank accumulates its own weight gradients over the micro-batches.
- update: each rank updates its own layer. No collective is needed.

Messages are tagged with the micro-batch number. The example prints what
each rank received during the first step, the loss (computed on the last
rank) going down, and checks every rank's layer against the same network
trained in a single process.
"""

import numpy as np

import meshcast as dist

WIDTH, BATCH, MICRO = 8, 32, 4  # features, examples per step, micro-batches per step
STEPS, LR = 40, 0.05


def show(title, x):
    """Print every rank's copy of ``x`` on rank 0, one line per rank."""
    rank, size = dist.get_rank(), dist.get_world_size()
    x = np.asarray(x)
    pieces = [np.empty_like(x) for _ in range(size)] if rank == 0 else None
    dist.gather(x, pieces, dst=0)
    if rank == 0:
        print(f"  {title}")
        for r, p in enumerate(pieces):
            print(f"    rank {r}: {np.array2string(p, precision=4, floatmode='fixed')}")


def step(name):
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"\n== {name}")


def init_layer(layer, n_layers):
    """Layer ``layer`` of the network (every rank can build any layer: seeds are fixed)."""
    rng = np.random.default_rng(100 + layer)
    out = 1 if layer == n_layers - 1 else WIDTH
    return rng.standard_normal((WIDTH, out)) / np.sqrt(WIDTH), np.zeros(out)


def batch(step_index):
    rng = np.random.default_rng(step_index)
    x = rng.standard_normal((BATCH, WIDTH))
    y = np.sin(x[:, :1]) + 0.3 * x[:, 1:2]
    return x, y


def forward(w, b, h, last):
    z = h @ w + b
    return z if last else np.tanh(z)


def backward(w, h_in, h_out, grad_out, last):
    """Gradients of one layer: (dW, db, gradient with respect to its input)."""
    g = grad_out if last else grad_out * (1 - h_out**2)
    return h_in.T @ g, g.sum(axis=0), g @ w.T


def train_step(w, b, step_index, rank, size):
    """One GPipe step of this rank's stage; returns the loss on the last rank, else None."""
    first, last = rank == 0, rank == size - 1
    x, y = batch(step_index)  # rank 0 uses x, the last rank uses y
    micro = BATCH // MICRO
    saved, loss, received = [], 0.0, {}
    for m in range(MICRO):  # forward, micro-batch by micro-batch
        if first:
            h_in = x[m * micro:(m + 1) * micro]
        else:
            h_in = np.empty((micro, WIDTH))
            dist.recv(h_in, src=rank - 1, tag=m)
        h_out = forward(w, b, h_in, last)
        saved.append((h_in, h_out))
        if not last:
            dist.send(h_out, dst=rank + 1, tag=m)
        received.setdefault("activation", h_in[0, :3].copy())

    dw, db = np.zeros_like(w), np.zeros_like(b)
    for m in reversed(range(MICRO)):  # backward, last micro-batch first
        h_in, h_out = saved[m]
        if last:
            err = h_out - y[m * micro:(m + 1) * micro]
            loss += float(np.sum(err**2)) / BATCH
            grad_out = 2 * err / BATCH  # d(mean squared error) / d(output)
        else:
            grad_out = np.empty_like(h_out)
            dist.recv(grad_out, src=rank + 1, tag=m)
        gw, gb, grad_in = backward(w, h_in, h_out, grad_out, last)
        dw += gw
        db += gb
        if not first:
            dist.send(grad_in, dst=rank - 1, tag=m)
        received["gradient norm"] = float(np.linalg.norm(grad_out))

    w -= LR * dw  # each stage updates its own layer
    b -= LR * db
    return (loss if last else None), received


def single_process(size):
    """The same network and training in one process: the reference."""
    layers = [init_layer(i, size) for i in range(size)]
    losses = []
    for s in range(STEPS):
        x, y = batch(s)
        hs = [x]
        for i, (w, b) in enumerate(layers):
            hs.append(forward(w, b, hs[-1], i == size - 1))
        err = hs[-1] - y
        losses.append(float(np.mean(err**2)))
        g = 2 * err / BATCH
        for i in reversed(range(size)):
            w, b = layers[i]
            gw, gb, g = backward(w, hs[i], hs[i + 1], g, i == size - 1)
            w -= LR * gw
            b -= LR * gb
    return layers, losses


def main():
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"meshcast pipeline: {size} stages (one layer each), batch {BATCH} in "
              f"{MICRO} micro-batches")

    step("1. each rank holds one layer")
    w, b = init_layer(rank, size)
    if rank == 0:
        for r in range(size):
            kind = "linear output" if r == size - 1 else "tanh"
            print(f"    rank {r}: weights {init_layer(r, size)[0].shape}, {kind}")
    show("weight norm before training", np.array([np.linalg.norm(w)]))

    step("2. the first step: what each stage received")
    loss, received = train_step(w, b, 0, rank, size)
    show("forward: first activation row received, [:3] (rank 0: the input)",
         received["activation"])
    show("backward: norm of the last gradient received (last rank: its own dL/dout)",
         np.array([received["gradient norm"]]))

    step(f"3. train {STEPS} steps")
    losses = np.zeros(STEPS)
    losses[0] = loss if loss is not None else 0.0
    for s in range(1, STEPS):
        loss, _ = train_step(w, b, s, rank, size)
        if loss is not None:
            losses[s] = loss
    dist.broadcast(losses, src=size - 1)  # the loss lives on the last rank
    if rank == 0:
        for s in range(0, STEPS, 10):
            print(f"  step {s:3d}  loss {losses[s]:.4f}")
        print(f"  step {STEPS - 1:3d}  loss {losses[-1]:.4f}")
    show("weight norm after training", np.array([np.linalg.norm(w)]))

    ref_layers, ref_losses = single_process(size)
    assert np.allclose(w, ref_layers[rank][0], rtol=1e-10, atol=1e-12), "weights differ"
    assert np.allclose(b, ref_layers[rank][1], rtol=1e-10, atol=1e-12), "biases differ"
    assert np.allclose(losses, ref_losses, rtol=1e-10), (losses, ref_losses)
    assert losses[-1] < 0.5 * losses[0], losses
    dist.barrier()
    if rank == 0:
        print("\npipeline OK: every stage equals the single-process network")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
