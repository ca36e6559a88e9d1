"""Every example in ``examples/`` runs under ``meshcast run`` and prints what it should.

The examples assert their own results (a wrong result makes a rank raise, so
the launcher exits non-zero); these tests add the exit code, key lines of
rank 0's output in order, and a few world sizes other than 4.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HAS_TORCH = importlib.util.find_spec("torch") is not None

# Key lines of rank 0's output at 4 ranks, in the order they must appear.
EXPECTED_AT_4 = {
    "tour.py": [
        "meshcast tour: 4 ranks",
        "== broadcast(x, src=0)", "rank 3: [0. 1. 2. 3.]",
        "== all_reduce(x, op=SUM)", "rank 3: [10 10 10 10]",
        "== reduce(x, dst=0, op=MAX)", "after (only rank 0 changed)", "rank 0: [ 3 10]",
        "== all_gather(out_list, x)", "rank 3: [ 0  1 10 11 20 21 30 31]",
        "== all_gather_into_tensor(out, x)", "rank 3: [ 0  1 10 11 20 21 30 31]",
        "rank 0 holds [0.5, 1.5, 2.5, 3.5]",
        "== scatter(", "rank 3: [103 103]",
        "== reduce_scatter(x, input_list)", "rank 3: [40 40]",
        "== reduce_scatter_tensor(out, inp)", "rank 3: [60 70]",
        "== all_to_all_single(out, inp)", "rank 3: [ 3  7 11 15]",
        "== all_to_all(out_list, in_list)", "rank 3: [ 3  3 13 13 23 23 33 33]",
        "== send / recv", "rank 0: [3]",
        "== async all_reduce", "rank 3: [4.]",
        "tour complete",
    ],
    "objects.py": [
        "== broadcast_object_list", "rank 3: [{'lr': 0.1, 'epochs': 3, 'model': 'mlp'}, 'run-42']",
        "== all_gather_object", "rank 3: [1.0, 0.5, 0.333, 0.25]",
        "== gather_object", "rank 0 holds: 'rank 3 counted 333 words'",
        "== scatter_object_list", "rank 0: ['part-00.csv', 'part-04.csv', 'part-08.csv']",
        "rank 3: ['part-03.csv', 'part-07.csv']",
        "== send_object_list", "rank 0: {'from': 3, 'text': 'hello from rank 3'}",
        "object collectives OK",
    ],
    "async_overlap.py": [
        "== 1. all_reduce(x, async_op=True)", "rank 3: [10. 10. 10.]",
        "chunks that ran entirely while the all_reduce was in flight", "overlapped",
        "== 2. DDP-style", "rank 3: [15.  12.5 10.   7.5  5.   2.5]",
        "async overlap OK",
    ],
    "data_parallel.py": [
        "logistic regression, 1000 examples x 8 features, 4 ranks",
        "after broadcast:", "rank 3: [ 0.0126 -0.0132  0.064   0.0105]",
        "epoch   0  global loss 0.6879", "epoch  59  global loss 0.1807",
        "identical on all ranks, equal to single-process training",
        "data parallel OK",
    ],
    "data_parallel_torch.py": [
        "MLP 6-16-1, batch 32 per rank, 4 ranks",
        "step   0  training loss", "step  99  training loss",
        "identical on all ranks; largest difference from single-process training with batch 128",
        "validation loss",
        "data parallel (torch) OK",
    ],
    "param_init_broadcast.py": [
        "== 1. every rank initializes", "rank 3: [ 0.8332 -1.0433  0.1707 -0.2318]",
        "== 2. broadcast(p, src=0)", "rank 3: [ 0.0513 -0.0539  0.2615  0.0428]",
        "== 3. only rank 0 has a checkpoint", "rank 3: [0.0000 0.0000 0.0000 0.0000 0.0000]",
        "rank 3: [ 1.0289  1.6419  1.1467 -0.9732 -1.3928]",
        "1 object broadcast + 1 broadcast of 48 values carried 4 tensors",
        "parameter initialization OK",
    ],
    "distributed_validation.py": [
        "1003 examples, 3 classes, 4 ranks",
        "rank 3: [209.3375 308.     401.    ]",
        "rank 3: [ 517.4364  769.     1003.    ]",
        "global: mean loss 0.5159, accuracy 76.67% over 1003 examples",
        "summed confusion matrix:", "229    15    74",
        "worst single-example loss: 4.0667",
        "mean of the per-rank means 0.5143 vs true mean 0.5159",
        "distributed validation OK",
    ],
    "pipeline.py": [
        "4 stages (one layer each)",
        "rank 3: weights (8, 1), linear output",
        "== 2. the first step", "rank 1: [ 0.7867 -0.6461  0.6412]",
        "step   0  loss 1.0329", "step  39  loss 0.0423",
        "pipeline OK: every stage equals the single-process network",
    ],
    "fsdp_pattern.py": [
        "433 parameters in 3 units, 4 ranks",
        "each rank keeps 109 of 433 parameters",
        "unit 0 gathered", "rank 3: [ 0.0445 -0.0467  0.2264  0.0371]",
        "unit 0 my shard of the averaged gradient", "rank 0: [ 0.0269 -0.0983  0.0074 -0.1048]",
        "step   0  loss 0.8012", "step  39  loss 0.0172",
        "FSDP pattern OK",
    ],
    "symmetric_buffers.py": [
        "5 parameters, 543498 gradients (2.07 MiB float32), 4 ranks",
        "is_symmetric(bucket): True; is_symmetric(np.zeros(4)): False",
        "b2[:4] before", "b2[:4] after (the same on every rank)",
        "algorithm: all_reduce/symmetric",
        "symmetric buffers OK",
    ],
    "hybrid_groups.py": [
        "4 ranks = 2 nodes x 2 ranks per node",
        "node group 1:  ranks [2, 3]", "cross group 1: ranks [1, 3]",
        "after the node all_reduce", "rank 3: [50 52 54 56]",
        "after the cross all_reduce", "rank 3: [60 64 68 72]",
        "after reduce_scatter_tensor", "rank 3: [14 21]",
        "after all_gather_into_tensor in the node", "rank 3: [ 0 10 20 30]",
        "hybrid groups OK",
    ],
}

# Other world sizes (and arguments) for some examples: the last line each prints.
OTHER_SIZES = [
    ("tour.py", 1, [], ["meshcast tour: 1 ranks", "rank 0: [0]", "tour complete"]),
    ("pipeline.py", 1, [], ["1 stages", "pipeline OK"]),
    ("data_parallel.py", 3, [], ["rank 0: [334]", "epoch  59  global loss 0.1807",
                                 "data parallel OK"]),
    ("fsdp_pattern.py", 3, [], ["each rank keeps 145 of 433 parameters", "FSDP pattern OK"]),
    ("distributed_validation.py", 3, [], ["global: mean loss 0.5159, accuracy 76.67%",
                                          "distributed validation OK"]),
    ("hybrid_groups.py", 4, ["--ranks-per-node", "4"],
     ["4 ranks = 1 nodes x 4 ranks per node", "hybrid groups OK"]),
]


def run_example(name: str, nproc: int, *args: str) -> str:
    """``python -m meshcast run -n nproc examples/name args``; returns stdout, asserts success."""
    env = dict(os.environ)
    for key in ("MESHCAST_SECRET", "MESHCAST_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "RANK",
                "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(key, None)  # in case the tests themselves run under a launcher
    env.setdefault("MESHCAST_TIMEOUT", "60")  # a hang becomes meshcast's report, not a kill
    res = subprocess.run(
        [sys.executable, "-m", "meshcast", "run", "-n", str(nproc), str(EXAMPLES / name), *args],
        capture_output=True, text=True, timeout=90, env=env, stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 0, (
        f"{name} at {nproc} ranks exited with {res.returncode}\n--- stdout\n"
        f"{res.stdout[-3000:]}\n--- stderr\n{res.stderr[-3000:]}")
    return res.stdout


def assert_in_order(out: str, expected: list[str]) -> None:
    pos = 0
    for line in expected:
        found = out.find(line, pos)
        assert found >= 0, f"missing (in this order) {line!r} in:\n{out}"
        pos = found + len(line)


def test_every_example_is_tested() -> None:
    on_disk = {p.name for p in EXAMPLES.glob("*.py")}
    assert on_disk == set(EXPECTED_AT_4), on_disk ^ set(EXPECTED_AT_4)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(EXPECTED_AT_4))
def test_example_shape(name: str) -> None:
    """A docstring saying how to run it, a guarded main(), destroy_process_group at the end."""
    source = (EXAMPLES / name).read_text()
    tree = ast.parse(source)
    doc = ast.get_docstring(tree)
    assert doc and f"meshcast run -n 4 examples/{name}" in doc
    assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
    guard = tree.body[-1]
    assert isinstance(guard, ast.If) and "__main__" in ast.unparse(guard.test)
    assert "dist.destroy_process_group()" in source


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(EXPECTED_AT_4))
def test_example_at_4_ranks(name: str) -> None:
    if name.endswith("_torch.py") and not HAS_TORCH:
        pytest.skip("torch is not installed")
    assert_in_order(run_example(name, 4), EXPECTED_AT_4[name])


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("name", "nproc", "args", "expected"), OTHER_SIZES,
                         ids=[f"{n}-n{k}{'-' + '_'.join(a) if a else ''}"
                              for n, k, a, _ in OTHER_SIZES])
def test_example_at_other_sizes(name: str, nproc: int, args: list[str],
                                expected: list[str]) -> None:
    assert_in_order(run_example(name, nproc, *args), expected)
