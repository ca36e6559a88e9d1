"""Symmetric buffers: gradients that live in shared memory, so all_reduce runs in place.

Run it with:  meshcast run -n 4 examples/symmetric_buffers.py

``dist.empty(shape, dtype)`` is collective: every rank gets its own array,
but all of them sit in one shared-memory segment that every rank can see.
A collective on such arrays skips the copy into meshcast's engine and back:
``all_reduce`` reads each peer's array where it lies, reduces its share and
writes the result into every rank's array.

The pattern shown is DDP's flat gradient bucket: one symmetric buffer holds
every parameter's gradient (each parameter's ``grad`` is a view into it), so
one all_reduce averages them all. Then the same bucket once more as an
ordinary NumPy array, to compare the time per call (printed, not promised:
see `meshcast bench --symmetric` for measurements).
"""

import time

import numpy as np

import meshcast as dist

SHAPES = {"embed": (4096, 128), "w1": (64, 256), "b1": (256,), "w2": (256, 10), "b2": (10,)}


def show(title, x):
    """Print every rank's copy of ``x`` on rank 0, one line per rank."""
    rank, size = dist.get_rank(), dist.get_world_size()
    pieces = [np.empty_like(x) for _ in range(size)] if rank == 0 else None
    dist.gather(np.ascontiguousarray(x), pieces, dst=0)
    if rank == 0:
        print(f"  {title}")
        for r, p in enumerate(pieces):
            print(f"    rank {r}: {np.array2string(p, precision=3)}")


def step(name):
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"\n== {name}")


def local_gradients(rank):
    """What backward() would leave on this rank: different data, different gradients."""
    rng = np.random.default_rng(rank)
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}


def per_call_us(fn, calls=20):
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main():
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    total = sum(int(np.prod(s)) for s in SHAPES.values())
    if rank == 0:
        print(f"meshcast symmetric buffers: {len(SHAPES)} parameters, {total} gradients "
              f"({total * 4 / 2**20:.2f} MiB float32), {size} ranks")

    step("1. bucket = dist.empty(n, float32): one allocation, collective over the group")
    bucket = dist.empty(total, np.float32)
    grads, offset = {}, 0
    for name, shape in SHAPES.items():
        n = int(np.prod(shape))
        grads[name] = bucket[offset:offset + n].reshape(shape)  # a view, no copy
        offset += n
    if rank == 0:
        print(f"  is_symmetric(bucket): {dist.is_symmetric(bucket)}; "
              f"is_symmetric(np.zeros(4)): {dist.is_symmetric(np.zeros(4))}")

    step("2. backward() writes each rank's gradients into the bucket's views")
    mine = local_gradients(rank)
    for name in SHAPES:
        grads[name][...] = mine[name]
    show("b2[:4] before", grads["b2"][:4])

    step("3. all_reduce(bucket, AVG): in place on shared memory")
    dist.all_reduce(bucket, op=dist.ReduceOp.AVG)
    algorithm = dist.group.WORLD.last_algorithm
    show("b2[:4] after (the same on every rank)", grads["b2"][:4])
    if rank == 0:
        print(f"  algorithm: {algorithm}")
    everyone = [local_gradients(r) for r in range(size)]
    for name in SHAPES:
        expected = np.sum([g[name] for g in everyone], axis=0, dtype=np.float32) / size
        assert np.allclose(grads[name], expected, rtol=1e-5, atol=1e-6), name

    step("4. the same bucket as an ordinary array, for comparison")
    plain = bucket.copy()
    avg = dist.ReduceOp.AVG  # averaging again leaves the values as they are
    t_plain = per_call_us(lambda: dist.all_reduce(plain, op=avg))
    t_sym = per_call_us(lambda: dist.all_reduce(bucket, op=avg))
    if rank == 0:
        print(f"  per call: ordinary array {t_plain:.0f} us, symmetric buffer {t_sym:.0f} us "
              f"(timings vary; not checked)")
    dist.barrier()
    if rank == 0:
        print("\nsymmetric buffers OK: the averaged gradients equal NumPy's")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
