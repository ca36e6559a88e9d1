"""Distributed validation: each rank scores its shard; all_reduce of sums gives the global metric.

Run it with:  meshcast run -n 4 examples/distributed_validation.py

Every rank evaluates a (fixed, already trained) softmax classifier on its own
shard of a validation set and keeps *sums*, not means: the loss summed over
its examples, the number it got right, the number of examples. One
all_reduce(SUM) of ``[loss_sum, correct, count]`` then gives every rank the
exact global mean loss and accuracy, whatever the shard sizes. Also shown:

- a confusion matrix (an int64 2-D array) summed with the same all_reduce;
- the worst single-example loss with ``ReduceOp.MAX``;
- the classic mistake: averaging the per-rank *means* (``ReduceOp.AVG``) is
  wrong as soon as the shards differ in size. Here they do on purpose (like
  data files of different lengths: rank r gets a share proportional to r+1).

Every number is checked against a single-process evaluation of the whole set.
"""

import numpy as np

import meshcast as dist

N, D, CLASSES = 1003, 5, 3


def show(title, x):
    """Print every rank's copy of ``x`` on rank 0, one line per rank."""
    rank, size = dist.get_rank(), dist.get_world_size()
    x = np.asarray(x)
    pieces = [np.empty_like(x) for _ in range(size)] if rank == 0 else None
    dist.gather(x, pieces, dst=0)
    if rank == 0:
        print(f"  {title}")
        for r, p in enumerate(pieces):
            text = np.array2string(p, precision=4, suppress_small=True)
            print(f"    rank {r}: {text.replace(chr(10), chr(10) + ' ' * 12)}")


def step(name):
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"\n== {name}")


def validation_set():
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((CLASSES, D)) * 1.5
    y = rng.integers(0, CLASSES, N)
    x = centers[y] + rng.standard_normal((N, D))
    return x, y, centers


def model(x, centers):
    """A 'trained' classifier: logits are similarities to the class centers."""
    return x @ centers.T - 0.5 * np.sum(centers**2, axis=1)


def per_example(x, y, centers):
    """Cross-entropy loss and prediction of every example."""
    logits = model(x, centers)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(y)), y], logits.argmax(axis=1)


def confusion(y, pred):
    m = np.zeros((CLASSES, CLASSES), np.int64)
    np.add.at(m, (y, pred), 1)
    return m


def my_shard(rank, size):
    """Uneven shards on purpose: rank r gets a share of N proportional to r + 1."""
    cuts = np.round(np.cumsum([0] + [r + 1 for r in range(size)]) / (size * (size + 1) / 2) * N)
    return slice(int(cuts[rank]), int(cuts[rank + 1]))


def main():
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    x_all, y_all, centers = validation_set()
    shard = my_shard(rank, size)
    x, y = x_all[shard], y_all[shard]
    if rank == 0:
        print(f"meshcast distributed validation: {N} examples, {CLASSES} classes, {size} ranks")

    step("1. each rank evaluates its own shard")
    losses, pred = per_example(x, y, centers)
    local = np.array([losses.sum(), np.sum(pred == y), len(y)], dtype=np.float64)
    show("[loss_sum, correct, count] of my shard", local)
    show("my shard's mean loss and accuracy", np.array([local[0] / local[2], local[1] / local[2]]))

    step("2. all_reduce([loss_sum, correct, count], SUM): the global metric on every rank")
    totals = local.copy()
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    show("after", totals)
    mean_loss, accuracy = totals[0] / totals[2], totals[1] / totals[2]
    if rank == 0:
        print(f"  global: mean loss {mean_loss:.4f}, accuracy {accuracy:.2%} "
              f"over {int(totals[2])} examples")

    step("3. confusion matrix (int64, 2-D) summed, worst example loss with MAX")
    matrix = confusion(y, pred)
    show("my confusion matrix (rows: true class, columns: predicted)", matrix)
    dist.all_reduce(matrix)
    worst = np.array([losses.max() if len(losses) else 0.0])
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    if rank == 0:
        print("  summed confusion matrix:")
        for row in matrix:
            print("    " + " ".join(f"{v:5d}" for v in row))
        print(f"  worst single-example loss: {worst[0]:.4f}")

    step("4. the mistake: all_reduce(mean, AVG) averages per-rank means")
    mean_of_means = np.array([local[0] / local[2]])
    dist.all_reduce(mean_of_means, op=dist.ReduceOp.AVG)
    if rank == 0:
        print(f"  mean of the per-rank means {mean_of_means[0]:.4f} vs true mean "
              f"{mean_loss:.4f}: wrong unless every shard has the same size")

    # Check against one process evaluating everything.
    all_losses, all_pred = per_example(x_all, y_all, centers)
    assert totals[2] == N
    assert np.isclose(mean_loss, all_losses.mean(), rtol=1e-12), (mean_loss, all_losses.mean())
    assert np.isclose(accuracy, np.mean(all_pred == y_all), rtol=1e-12)
    assert np.array_equal(matrix, confusion(y_all, all_pred))
    assert worst[0] == all_losses.max()
    if size > 1:
        assert not np.isclose(mean_of_means[0], mean_loss, rtol=1e-6)
    dist.barrier()
    if rank == 0:
        print("\ndistributed validation OK: equal to a single-process evaluation")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
