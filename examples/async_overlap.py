"""Asynchronous all_reduce: keep computing while the collective is in flight.

Run it with:  meshcast run -n 4 examples/async_overlap.py

``all_reduce(x, async_op=True)`` returns a ``Work`` at once; the reduction
runs on a meshcast worker thread (NumPy and the waits release the GIL) while
this thread keeps computing, and ``work.wait()`` blocks only for what is left.
Two steps:

1. one big all_reduce overlapped with a computation cut into small chunks;
   after each chunk we ask ``work.is_completed()``: each False means that
   whole chunk ran while the all_reduce was in flight. And we time it all.
2. the pattern data-parallel training uses (DDP's gradient buckets): the
   backward pass produces the gradients of the last layer first; each is
   all-reduced asynchronously as soon as it exists, while the gradients of
   the earlier layers are still being computed. One ``wait()`` per bucket at
   the end, and the result is checked against plain blocking all_reduces.

Times are the slowest rank's best of three (an all_reduce with op=MAX).
Read them with the machine in mind: on shared memory the all_reduce is
itself CPU work (copying and adding), so overlapping it with computation
saves time only when there are idle cores (more cores than ranks) or when a
rank waits for a late peer. With more ranks than cores (4 ranks on a 2-core
laptop) both compete for the same cores and the overlapped time is no better
than one after the other; the chunk count still shows that both ran at once.
"""

import time

import numpy as np

import meshcast as dist

N_REDUCE = 1 << 21  # elements of the big all_reduce (8 MB of float32)
CHUNKS = 40  # the computation of step 1, in pieces
LAYERS = 6  # step 2: one gradient bucket per layer
BUCKET = 1 << 17  # elements per gradient bucket


def show(title, x):
    """Print every rank's copy of ``x`` on rank 0, one line per rank."""
    rank, size = dist.get_rank(), dist.get_world_size()
    x = np.asarray(x)
    pieces = [np.empty_like(x) for _ in range(size)] if rank == 0 else None
    dist.gather(x, pieces, dst=0)
    if rank == 0:
        print(f"  {title}")
        for r, p in enumerate(pieces):
            print(f"    rank {r}: {np.array2string(p, precision=3, suppress_small=True)}")


def step(name):
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"\n== {name}")


def timed(fn, repeats=3):
    """Run ``fn`` on every rank ``repeats`` times; the slowest rank's best time in ms.

    Each rank keeps its fastest run (the others were disturbed by something
    else), then an all_reduce with op=MAX picks the slowest rank's.
    """
    best = float("inf")
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    t = np.array([best * 1e3])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0])


def compute_chunk(a):
    """A piece of 'model computation': NumPy work that releases the GIL."""
    return float(np.tanh(a @ a.T).sum())


def backward_layer(layer, rank, a):
    """Pretend backward pass of one layer: some matmuls, then a gradient bucket."""
    for _ in range(4):
        compute_chunk(a)
    return np.full(BUCKET, (layer + 1) * (rank + 1), dtype=np.float32)


def main():
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"meshcast async overlap: {size} ranks")
    a = np.random.default_rng(rank).standard_normal((160, 160))
    expected = size * (size + 1) / 2  # sum over ranks of (rank + 1)

    step(f"1. all_reduce(x, async_op=True) of {N_REDUCE} floats while computing {CHUNKS} chunks")
    x = np.full(N_REDUCE, rank + 1, dtype=np.float32)
    counts = {}

    def reduce_alone():
        x[:] = rank + 1
        dist.all_reduce(x)

    def compute_alone():
        for _ in range(CHUNKS):
            compute_chunk(a)

    def overlapped():
        x[:] = rank + 1
        work = dist.all_reduce(x, async_op=True)  # returns at once
        in_flight = 0
        for _ in range(CHUNKS):
            compute_chunk(a)
            # Not finished yet: this whole chunk ran while the all_reduce was in flight.
            in_flight += not work.is_completed()
        work.wait()  # only what is left of the all_reduce
        counts["in_flight"] = in_flight

    ms_comm, ms_compute = timed(reduce_alone), timed(compute_alone)
    x[:] = rank + 1
    show("before: x[:3]", x[:3])
    ms_both = timed(overlapped)
    show("after wait(): x[:3]", x[:3])
    show("chunks that ran entirely while the all_reduce was in flight (last run)",
         np.array([counts["in_flight"]]))
    if rank == 0:
        print(f"  all_reduce alone {ms_comm:6.1f} ms | computation alone {ms_compute:6.1f} ms | "
              f"one after the other {ms_comm + ms_compute:6.1f} ms | overlapped {ms_both:6.1f} ms")
    assert np.all(x == expected), x[:4]

    step(f"2. DDP-style: all_reduce each of {LAYERS} gradient buckets as soon as backward makes it")
    out = {}

    def backward_then_reduce():  # compute every gradient, then blocking all_reduces
        grads = [backward_layer(layer, rank, a) for layer in reversed(range(LAYERS))]
        for g in grads:
            dist.all_reduce(g, op=dist.ReduceOp.AVG)
        out["blocking"] = grads

    def backward_with_buckets():
        grads, works, overlapped = [], [], 0
        for layer in reversed(range(LAYERS)):  # backward: last layer first
            g = backward_layer(layer, rank, a)
            # An earlier bucket still unfinished: it was in flight during this whole layer.
            overlapped += any(not w.is_completed() for w in works)
            grads.append(g)
            works.append(dist.all_reduce(g, op=dist.ReduceOp.AVG, async_op=True))
        for w in works:  # before the optimizer step
            w.wait()
        out["async"], out["overlapped"] = grads, overlapped

    ms_blocking, ms_async = timed(backward_then_reduce), timed(backward_with_buckets)
    show("first element of each averaged gradient (last layer first)",
         np.array([g[0] for g in out["async"]]))
    show("layers whose whole backward ran while an earlier bucket was in flight (last run)",
         np.array([out["overlapped"]]))
    if rank == 0:
        print(f"  backward, then blocking all_reduces {ms_blocking:6.1f} ms | "
              f"overlapped buckets {ms_async:6.1f} ms")
    for g, b, layer in zip(out["async"], out["blocking"], reversed(range(LAYERS))):
        assert np.array_equal(g, b), layer
        assert np.allclose(g, (layer + 1) * expected / size), (layer, g[:3])

    dist.barrier()
    if rank == 0:
        print("\nasync overlap OK: results match the blocking all_reduce")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
