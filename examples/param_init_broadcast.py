"""Parameter initialization by broadcast: every replica starts from rank 0's parameters.

Run it with:  meshcast run -n 4 examples/param_init_broadcast.py

Random initialization differs from process to process (different seeds,
different number of random draws before, ...). Data-parallel training needs
every replica to start from the same point, so rank 0's parameters are
broadcast to everyone before the first step (DDP does exactly this when it
wraps a model). Three steps:

1. every rank initializes a small MLP on its own: the replicas differ;
2. ``broadcast(p, src=0)`` for each parameter, in the same order on every
   rank (collectives are matched by call order, not by name);
3. only rank 0 has a checkpoint: it sends the names, shapes and dtypes first
   with ``broadcast_object_list`` (the other ranks cannot allocate buffers
   without them), then all the values in ONE broadcast of a flat buffer:
   one large message instead of one per parameter, which is what DDP's
   coalesced broadcast does.

After steps 2 and 3 the example checks that every rank holds rank 0's
values, bit for bit.
"""

import numpy as np

import meshcast as dist

SHAPES = {"w1": (4, 8), "b1": (8,), "w2": (8, 3), "b2": (3,)}


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


def init_params(seed):
    """A freshly initialized MLP (Xavier-style weights, zero biases)."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in SHAPES.items():
        if name.startswith("w"):
            params[name] = rng.standard_normal(shape) * np.sqrt(2 / sum(shape))
        else:
            params[name] = np.zeros(shape)
    return params


def load_checkpoint():
    """What rank 0 would read from disk: parameters of several dtypes."""
    rng = np.random.default_rng(2024)
    return {
        "embedding": rng.standard_normal((6, 4)).astype(np.float32),
        "w": rng.standard_normal((4, 4)).astype(np.float32),
        "b": np.arange(4, dtype=np.float32) / 10,
        "norm_gain": np.linspace(0.5, 1.5, 4, dtype=np.float32),
    }


def assert_same_everywhere(params):
    """All ranks hold bitwise the same values (compared through an all_gather)."""
    size = dist.get_world_size()
    flat = np.concatenate([p.ravel() for p in params.values()])
    everyone = np.empty((size, flat.size), flat.dtype)
    dist.all_gather_into_tensor(everyone, flat)
    assert all(np.array_equal(row, flat) for row in everyone), "replicas differ"


def main():
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"meshcast parameter initialization by broadcast: {size} ranks")

    step("1. every rank initializes its own replica (a different seed on each)")
    params = init_params(seed=rank)
    show("w1[0, :4] before", params["w1"][0, :4])

    step("2. broadcast(p, src=0) for each parameter, in the same order everywhere")
    for name in SHAPES:  # dict order is insertion order: the same on every rank
        dist.broadcast(params[name], src=0)
    show("w1[0, :4] after", params["w1"][0, :4])
    assert_same_everywhere(params)
    reference = init_params(seed=0)
    assert all(np.array_equal(params[n], reference[n]) for n in SHAPES)
    if rank == 0:
        print(f"  {len(SHAPES)} broadcasts; every rank now holds rank 0's initialization")

    step("3. only rank 0 has a checkpoint: metadata by object, values in one flat broadcast")
    ckpt = load_checkpoint() if rank == 0 else None
    meta = [[(k, v.shape, v.dtype.str) for k, v in ckpt.items()] if rank == 0 else None]
    dist.broadcast_object_list(meta, src=0)  # names, shapes and dtypes
    meta = meta[0]
    sizes = [int(np.prod(shape)) for _, shape, _ in meta]
    dtype = np.dtype(meta[0][2])
    assert all(np.dtype(d) == dtype for _, _, d in meta), "one flat buffer needs one dtype"
    flat = (np.concatenate([v.ravel() for v in ckpt.values()]) if rank == 0
            else np.zeros(sum(sizes), dtype))
    show("flat buffer [:5] before", flat[:5])
    dist.broadcast(flat, src=0)  # one message for all parameters
    show("flat buffer [:5] after", flat[:5])
    offsets = np.cumsum([0] + sizes)
    loaded = {name: flat[o:o + n].reshape(shape)  # views into the flat buffer
              for (name, shape, _), o, n in zip(meta, offsets, sizes)}
    assert_same_everywhere(loaded)
    expected = load_checkpoint()
    assert all(np.array_equal(loaded[k], expected[k]) for k in expected)
    if rank == 0:
        print(f"  1 object broadcast + 1 broadcast of {flat.size} values carried "
              f"{len(meta)} tensors: {', '.join(f'{n}{tuple(s)}' for n, s, _ in meta)}")
        print("\nparameter initialization OK: all ranks hold rank 0's parameters")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
