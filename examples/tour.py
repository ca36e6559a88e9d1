"""A tour of meshcast's primitives: what every rank holds before and after each one.

Run it with:  meshcast run -n 4 examples/tour.py

Each step prints a small table made on rank 0 (the other ranks send it their
data with ``gather``, so the printout itself is a collective too). The
collectives of picklable Python objects (broadcast_object_list, ...) have
their own tour: examples/objects.py.
"""

import numpy as np

import meshcast as dist


def show(title, x):
    """Print every rank's copy of ``x`` on rank 0, one line per rank."""
    rank, size = dist.get_rank(), dist.get_world_size()
    x = np.asarray(x)
    pieces = [np.empty_like(x) for _ in range(size)] if rank == 0 else None
    dist.gather(x, pieces, dst=0)
    if rank == 0:
        print(f"  {title}")
        for r, p in enumerate(pieces):
            print(f"    rank {r}: {np.array2string(p, precision=2)}")


def step(name):
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"\n== {name}")


def main():
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        launch = dist.launch_env()
        print(f"meshcast tour: {size} ranks, launched by {launch.launcher}")

    step("broadcast(x, src=0): rank 0's data goes to everyone")
    x = np.arange(4, dtype=np.float32) * (rank + 1)
    show("before", x)
    dist.broadcast(x, src=0)
    show("after", x)

    step("all_reduce(x, op=SUM): everyone gets the element-wise sum")
    x = np.full(4, rank + 1, dtype=np.int64)
    show("before", x)
    dist.all_reduce(x)
    show("after", x)

    step("reduce(x, dst=0, op=MAX): only rank 0 gets the maximum")
    x = np.array([rank, 10 - rank], dtype=np.int32)
    show("before", x)
    dist.reduce(x, dst=0, op=dist.ReduceOp.MAX)
    show("after (only rank 0 changed)", x)

    step("all_gather(out_list, x): everyone gets everyone's piece")
    x = np.array([rank * 10, rank * 10 + 1])
    out = [np.zeros(2, dtype=x.dtype) for _ in range(size)]
    show("before (x)", x)
    dist.all_gather(out, x)
    show("after (concatenated list)", np.concatenate(out))

    step("all_gather_into_tensor(out, x): the same, into one array of size*len(x)")
    x = np.array([rank * 10, rank * 10 + 1])
    out = np.zeros(2 * size, dtype=x.dtype)
    show("before (x)", x)
    dist.all_gather_into_tensor(out, x)
    show("after", out)

    step("gather(x, gather_list, dst=0): rank 0 collects every piece")
    x = np.array([rank + 0.5])
    got = [np.zeros(1) for _ in range(size)] if rank == 0 else None
    dist.gather(x, got, dst=0)
    if rank == 0:
        print(f"  rank 0 holds {[float(g[0]) for g in got]}")

    step("scatter(x, scatter_list, src=0): rank 0 hands out one piece each")
    pieces = [np.full(2, 100 + r) for r in range(size)] if rank == 0 else None
    x = np.zeros(2, dtype=np.int64)
    show("before", x)
    dist.scatter(x, pieces, src=0)
    show("after", x)

    step("reduce_scatter(x, input_list): sum piece r over ranks, rank r keeps it")
    inputs = [np.full(2, rank + 1) * (r + 1) for r in range(size)]
    x = np.zeros(2, dtype=np.int64)
    show("before (each rank's input, concatenated)", np.concatenate(inputs))
    dist.reduce_scatter(x, inputs)
    show("after", x)

    step("reduce_scatter_tensor(out, inp): the same with the pieces in one array")
    inp = np.arange(2 * size) * (rank + 1)
    x = np.zeros(2, dtype=inp.dtype)
    show("before (each rank's input)", inp)
    dist.reduce_scatter_tensor(x, inp)
    show("after (rank r holds the sum of elements 2r, 2r+1)", x)

    step("all_to_all_single(out, inp): piece r of my input goes to rank r")
    inp = np.arange(size) + rank * size
    out = np.zeros(size, dtype=inp.dtype)
    show("before", inp)
    dist.all_to_all_single(out, inp)
    show("after (a transpose)", out)

    step("all_to_all(out_list, in_list): in_list[r] goes to rank r, out_list[r] comes from it")
    ins = [np.full(2, rank * 10 + r) for r in range(size)]
    outs = [np.zeros(2, dtype=ins[0].dtype) for _ in range(size)]
    show("before (in_list, concatenated)", np.concatenate(ins))
    dist.all_to_all(outs, ins)
    show("after (out_list, concatenated)", np.concatenate(outs))

    step("send / recv: a ring, each rank passes its rank to the next")
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    token = np.array([rank])
    got = np.zeros(1, dtype=token.dtype)
    if size > 1:
        ops = [dist.P2POp(dist.isend, token, nxt), dist.P2POp(dist.irecv, got, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    else:
        got[:] = token
    show("received from the previous rank", got)

    step("async all_reduce: start it, compute meanwhile, then wait")
    x = np.ones(1 << 20, dtype=np.float32)
    work = dist.all_reduce(x, async_op=True)
    busy = float(np.sin(np.arange(1 << 18)).sum())  # overlaps with the all_reduce
    work.wait()
    show("first element after wait()", x[:1])
    _ = busy

    step("barrier(): everyone waits for everyone")
    dist.barrier()
    if rank == 0:
        print("  all ranks passed the barrier\n\ntour complete")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
