"""Fully sharded data parallel (FSDP / ZeRO-3), by hand on a NumPy MLP.

Run it with:  meshcast run -n 4 examples/fsdp_pattern.py

Plain data parallelism keeps a full copy of the parameters, gradients and
optimizer state on every rank. FSDP keeps only 1/N of each on each rank and
gathers the rest just in time. Each layer is a "unit" whose parameters are
flattened, padded to a multiple of N and cut into N equal shards:

- start: rank 0 builds the model and ``scatter``s the shards: rank r keeps
  shard r (plus its own momentum buffer, also 1/N of the unit);
- forward, layer by layer: ``all_gather_into_tensor`` the unit's shards into
  the full parameters, compute, and drop them again;
- backward, last layer first: gather the unit again, compute its
  gradients on the local batch, then ``reduce_scatter_tensor(op=AVG)``: rank r
  receives only shard r of the gradient averaged over all ranks, exactly
  the piece it needs to update its own parameter shard.

So a rank holds at most one unit in full, briefly. The example prints the
shards, a gathered unit, a gradient before and after reduce-scatter, the loss
going down, and checks the result against one process training the whole
model on the combined batch (the same momentum SGD).
"""

import numpy as np

import meshcast as dist

LAYERS = [(8, 16), (16, 16), (16, 1)]  # (inputs, outputs) of each layer
BATCH, STEPS, LR, MOMENTUM = 16, 40, 0.05, 0.9  # BATCH: examples per rank per step


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


def init_model():
    """The full model, as rank 0 builds it: a list of (w, b) per layer."""
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((i, o)) / np.sqrt(i), np.zeros(o)) for i, o in LAYERS]


def batch(step_index, size):
    """The combined batch of one step; rank r trains on rows [r*BATCH, (r+1)*BATCH)."""
    rng = np.random.default_rng(1000 + step_index)
    x = rng.standard_normal((size * BATCH, LAYERS[0][0]))
    return x, np.tanh(x[:, :2].sum(axis=1, keepdims=True)) + 0.1 * x[:, 2:3]


class Unit:
    """One layer's parameters, flattened and sharded: this rank keeps 1/size of them."""

    def __init__(self, n_in, n_out, size):
        self.shapes = [(n_in, n_out), (n_out,)]
        self.numel = n_in * n_out + n_out
        self.shard_len = -(-self.numel // size)  # ceil: the flat vector is padded
        self.shard = np.zeros(self.shard_len)
        self.momentum = np.zeros(self.shard_len)  # optimizer state: sharded too
        self.size = size

    def flatten(self, w, b):
        flat = np.zeros(self.shard_len * self.size)
        flat[:self.numel] = np.concatenate([w.ravel(), b])
        return flat

    def gather(self):
        """The full (w, b): all_gather_into_tensor of everyone's shard."""
        full = np.empty(self.shard_len * self.size)
        dist.all_gather_into_tensor(full, self.shard)
        (n_in, n_out), _ = self.shapes
        return full[:n_in * n_out].reshape(n_in, n_out), full[n_in * n_out:self.numel]

    def reduce_scatter_and_step(self, gw, gb):
        """Average the gradient over ranks, keep my shard of it, update my parameter shard."""
        grad = np.empty(self.shard_len)
        dist.reduce_scatter_tensor(grad, self.flatten(gw, gb), op=dist.ReduceOp.AVG)
        self.momentum = MOMENTUM * self.momentum + grad
        self.shard -= LR * self.momentum
        return grad


def layer_forward(w, b, h, last):
    z = h @ w + b
    return z if last else np.tanh(z)


def layer_backward(w, h_in, h_out, g, last):
    g = g if last else g * (1 - h_out**2)
    return h_in.T @ g, g.sum(axis=0), g @ w.T


def train_step(units, x, y, trace=None):
    """Forward and backward with just-in-time gathers; returns the local loss."""
    acts = [x]
    for i, unit in enumerate(units):  # forward
        w, b = unit.gather()  # full parameters exist only inside this iteration
        acts.append(layer_forward(w, b, acts[-1], i == len(units) - 1))
        if trace is not None and i == 0:
            trace["gathered"] = w[0, :4].copy()
    err = acts[-1] - y
    g = 2 * err / len(y)  # d(mean squared error) / d(output)
    for i in reversed(range(len(units))):  # backward
        unit = units[i]
        w, b = unit.gather()  # gathered again: it was dropped after the forward
        gw, gb, g = layer_backward(w, acts[i], acts[i + 1], g, i == len(units) - 1)
        grad_shard = unit.reduce_scatter_and_step(gw, gb)
        if trace is not None and i == 0:
            trace["local grad"] = unit.flatten(gw, gb)[:4]
            trace["grad shard"] = grad_shard[:4]
    return float(np.mean(err**2))


def reference(size):
    """Single process, full model, combined batch, same optimizer."""
    model = init_model()
    moms = [(np.zeros_like(w), np.zeros_like(b)) for w, b in model]
    for s in range(STEPS):
        x, y = batch(s, size)
        acts = [x]
        for i, (w, b) in enumerate(model):
            acts.append(layer_forward(w, b, acts[-1], i == len(model) - 1))
        g = 2 * (acts[-1] - y) / len(y)
        for i in reversed(range(len(model))):
            w, b = model[i]
            gw, gb, g = layer_backward(w, acts[i], acts[i + 1], g, i == len(model) - 1)
            mw, mb = moms[i]
            mw *= MOMENTUM
            mw += gw
            mb *= MOMENTUM
            mb += gb
            w -= LR * mw
            b -= LR * mb
    return model


def main():
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    units = [Unit(i, o, size) for i, o in LAYERS]
    total = sum(u.numel for u in units)
    if rank == 0:
        print(f"meshcast FSDP pattern: MLP {' -> '.join(str(i) for i, _ in LAYERS)} -> 1, "
              f"{total} parameters in {len(units)} units, {size} ranks")

    step("1. rank 0 builds the model and scatters the shards")
    model = init_model() if rank == 0 else None
    for i, unit in enumerate(units):
        pieces = np.split(unit.flatten(*model[i]), size) if rank == 0 else None
        dist.scatter(unit.shard, pieces, src=0)
    show("unit 0: my shard[:4]", units[0].shard[:4])
    kept = sum(u.shard_len for u in units)
    if rank == 0:
        print(f"  each rank keeps {kept} of {total} parameters (+ as much momentum), "
              f"padding included")

    step("2. the first step, forward: all_gather_into_tensor(full, shard) before each layer")
    trace = {}
    x, y = batch(0, size)
    mine = slice(rank * BATCH, (rank + 1) * BATCH)
    first_loss = train_step(units, x[mine], y[mine], trace)
    show("unit 0 gathered: w[0, :4] (the same everywhere)", trace["gathered"])
    if rank == 0:
        print("  ...backward: reduce_scatter_tensor(grad_shard, full_grad, op=AVG)")
    show("unit 0 local gradient[:4] (my batch only)", trace["local grad"])
    show("unit 0 my shard of the averaged gradient[:4]", trace["grad shard"])

    step(f"3. train {STEPS} steps")
    losses = [first_loss]
    for s in range(1, STEPS):
        x, y = batch(s, size)
        losses.append(train_step(units, x[mine], y[mine]))
    history = np.array(losses)
    dist.all_reduce(history, op=dist.ReduceOp.AVG)  # mean over ranks = combined batch loss
    if rank == 0:
        for s in [*range(0, STEPS, 10), STEPS - 1]:
            print(f"  step {s:3d}  loss {history[s]:.4f}")
    show("unit 0: my shard[:4] after training", units[0].shard[:4])

    # Check: gather every unit and compare with one process training the full model.
    ref = reference(size)
    for unit, (w_ref, b_ref) in zip(units, ref):
        w, b = unit.gather()
        assert np.allclose(w, w_ref, rtol=1e-9, atol=1e-12), "weights differ"
        assert np.allclose(b, b_ref, rtol=1e-9, atol=1e-12), "biases differ"
    assert history[-1] < 0.5 * history[0], history
    dist.barrier()
    if rank == 0:
        print("\nFSDP pattern OK: the gathered model equals single-process training")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
