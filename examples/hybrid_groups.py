"""Subgroups and a hierarchical all_reduce: inside each "node", then across nodes.

Run it with:  meshcast run -n 4 examples/hybrid_groups.py [--ranks-per-node K]

On a cluster, ranks on the same machine talk through fast shared memory and
ranks on different machines through a slower network, so collectives are
built in two levels. This example pretends that consecutive ranks form a
node (pairs by default when the world size is even; under a real multi-node
launch, LOCAL_WORLD_SIZE ranks per node) and makes two kinds of groups with
``new_group``:

- a node group for each node: the ranks of that node;
- a cross group for each local index: the ranks with that index on every
  node (rank 0 of each node, rank 1 of each node, ...).

Every rank calls ``new_group`` for every group, in the same order (torch's
rule too); a rank uses only the two groups it belongs to. Then:

1. all_reduce in the node group, then all_reduce in the cross group: every
   rank holds the global sum, checked against a flat all_reduce;
2. the bandwidth-saving form: reduce_scatter_tensor in the node (each local
   rank ends with the node's sum of 1/K of the data), all_reduce of only
   that piece across nodes, all_gather_into_tensor in the node. Each rank
   sends only 1/K of the data over the "network".
"""

import argparse
import os

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
            print(f"    rank {r}: {np.array2string(p)}")


def step(name):
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"\n== {name}")


def ranks_per_node(size, requested):
    """K: --ranks-per-node, else the launcher's LOCAL_WORLD_SIZE if the job spans
    several nodes, else pairs (when the world size is even)."""
    if requested:
        k = requested
    else:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", size))
        k = local if local < size else (2 if size % 2 == 0 else 1)
    if k < 1 or size % k:
        raise SystemExit(f"--ranks-per-node {k} does not divide the world size {size}")
    return k


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks-per-node", type=int, default=0)
    args = parser.parse_args()

    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    k = ranks_per_node(size, args.ranks_per_node)
    nodes = size // k

    # Every rank creates every group, in the same order.
    node_groups = [dist.new_group(list(range(n * k, (n + 1) * k))) for n in range(nodes)]
    cross_groups = [dist.new_group(list(range(i, size, k))) for i in range(k)]
    node, local = divmod(rank, k)
    node_group, cross_group = node_groups[node], cross_groups[local]

    if rank == 0:
        print(f"meshcast hybrid groups: {size} ranks = {nodes} nodes x {k} ranks per node")
        for n in range(nodes):
            print(f"  node group {n}:  ranks {list(range(n * k, (n + 1) * k))}")
        for i in range(k):
            print(f"  cross group {i}: ranks {list(range(i, size, k))}")

    step("0. where each rank sits")
    where = np.array([node, dist.get_rank(node_group), dist.get_rank(cross_group)])
    show("[node, my rank in my node group, my rank in my cross group]", where)
    assert where[1] == local and where[2] == node
    assert dist.get_process_group_ranks(node_group) == list(range(node * k, (node + 1) * k))

    step("1. all_reduce in the node group, then in the cross group")
    x = np.arange(4, dtype=np.int64) + 10 * rank
    flat = x.copy()
    dist.all_reduce(flat)  # the reference: one all_reduce over the whole world
    show("before", x)
    dist.all_reduce(x, group=node_group)
    show("after the node all_reduce (equal within each node)", x)
    dist.all_reduce(x, group=cross_group)
    show("after the cross all_reduce (the global sum everywhere)", x)
    assert np.array_equal(x, flat), (x, flat)
    if rank == 0:
        print(f"  equal to a flat all_reduce: {np.array2string(flat)}")

    step("2. reduce_scatter in the node, all_reduce of 1/K across nodes, all_gather in the node")
    n = 2 * k  # elements; any multiple of k works
    y = np.arange(n, dtype=np.int64) * (rank + 1)
    flat = y.copy()
    dist.all_reduce(flat)
    show("before", y)
    piece = np.empty(n // k, dtype=y.dtype)
    dist.reduce_scatter_tensor(piece, y, group=node_group)
    show(f"my piece ({n // k} of {n}) of my node's sum, after reduce_scatter_tensor", piece)
    dist.all_reduce(piece, group=cross_group)  # only n/k elements cross the network
    show("the piece after the cross all_reduce (summed over nodes)", piece)
    dist.all_gather_into_tensor(y, piece, group=node_group)
    show("after all_gather_into_tensor in the node", y)
    assert np.array_equal(y, flat), (y, flat)

    dist.barrier()
    if rank == 0:
        print("\nhybrid groups OK: both hierarchical all_reduces equal the flat one")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
