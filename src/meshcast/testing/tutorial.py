"""What the torch tutorial snippets (examples/, run by tests/torch/run_examples.py) must
print on ``n`` ranks: the check shared by the single-host and the across-hosts tests."""

from __future__ import annotations

import re


def _values(out: str, pattern: str) -> dict[int, str]:
    return {int(r): v for r, v in re.findall(pattern, out)}


def check_tutorial_output(out: str, n: int) -> None:
    """Assert every rank's lines of the tutorial run in ``out`` (launcher prefixes removed)."""
    for r in range(n):
        assert f"rank {r}: after broadcast [0.0, 1.0, 2.0, 3.0]" in out
        total = float(n * (n + 1) // 2)
        assert f"rank {r}: after all_reduce [{total}, {total}, {total}]" in out
        assert f"rank {r}: received [{10.0 * r}, {10.0 * r}]" in out
        assert re.search(rf"rank {r}: local work \d+, all_reduce done: True, result "
                         rf"{float(sum(range(n)))}", out)
        assert f"rank {r}: future value doubled [{2.0 * n}, {2.0 * n}]" in out
        assert f"rank {r}: has data 1.0" in out
        left = (r - 1) % n
        assert f"rank {r}: received {float(left)} from rank {left}" in out
    gathered = [[float(r), float(r * r)] for r in range(n)]
    assert f"rank 0: gathered {gathered}" in out
    for pattern in (r"rank (\d): replica checksum (\S+)",
                    r"rank (\d): after broadcast checksum (\S+)",
                    r"rank (\d): accuracy (\S+) =",
                    r"rank (\d): parameter checksum (\S+)"):
        values = _values(out, pattern)
        assert sorted(values) == list(range(n)) and len(set(values.values())) == 1, (
            pattern, values)
    before = _values(out, r"rank (\d): before broadcast checksum (\S+)")
    assert len(set(before.values())) == n  # the replicas did start different
    correct = sum(int(c) for c in re.findall(r"rank \d: (\d+) of \d+ correct", out))
    assert _values(out, r"rank (\d): accuracy (\d+)/100")[0] == str(correct)
    for r in range(1, n, 2):
        losses = [float(x) for x in re.findall(rf"rank {r}: step \d loss (\S+)", out)]
        assert len(losses) == 4 and losses[-1] < losses[0], losses
    losses = [float(x) for x in re.findall(r"epoch \d: mean loss (\S+)", out)]
    assert len(losses) == 5 and losses[-1] < losses[0], losses
