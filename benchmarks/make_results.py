"""Regenerate this folder's results pages: three `meshcast bench` runs with the peers.

Run:  python benchmarks/make_results.py [extra meshcast bench flags]
Each run writes a page (README.md, results/bench.jsonl, results/*.svg,
results/bench.html; results/bench.png too when matplotlib is installed):

* ``benchmarks/``: every collective, 8 B .. 64 MiB in steps of 4, 2 ranks,
  best of 3 rounds, meshcast beside Gloo and MPICH;
* ``benchmarks/symmetric/``: the collectives that run in place on symmetric
  buffers (``meshcast.empty``), 8 B .. 64 MiB, beside plain meshcast and MPICH;
* ``benchmarks/ranks4/``: 4 ranks on the 2 cores (oversubscribed), beside MPICH.

Needs `pip install -e '.[test]'` (torch, mpi4py, mpich) for the peers; a
missing peer is skipped and the page says so. Extra flags apply to every run.
"""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

RUNS = [
    ("", ["-n", "2", "--op", "all", "-b", "8", "-e", "64M", "-f", "4", "--rounds", "3",
          "--compare", "gloo,mpi"]),
    ("symmetric", ["-n", "2", "--op", "all_reduce,broadcast,all_gather,reduce_scatter",
                   "-b", "8", "-e", "64M", "-f", "4", "--rounds", "3", "--symmetric",
                   "--compare", "meshcast,mpi"]),
    ("ranks4", ["-n", "4", "--op", "all_reduce,all_gather,reduce_scatter,broadcast,all_to_all",
                "-b", "8", "-e", "16M", "-f", "4", "--rounds", "2", "--compare", "mpi"]),
]

MORE = """
## More runs

- [symmetric/](symmetric/README.md): meshcast on symmetric buffers
  (`meshcast.empty`, collectives in place on shared memory) beside plain
  meshcast and MPICH, up to 64 MiB.
- [ranks4/](ranks4/README.md): 4 ranks on 2 cores (oversubscribed) beside MPICH.
"""


def settle(limit: float = 0.8, patience: float = 180.0) -> None:
    """Wait (up to ``patience`` s) until the 1-minute load average is below ``limit``: the
    previous run's own load would otherwise mark the next page as taken on a busy machine."""
    deadline = time.monotonic() + patience
    while os.getloadavg()[0] >= limit and time.monotonic() < deadline:
        time.sleep(5)


def main() -> int:
    status = 0
    for sub, flags in RUNS:
        settle()
        report_dir = os.path.relpath(os.path.join(HERE, sub))
        argv = [sys.executable, "-m", "meshcast", "bench", *flags, *sys.argv[1:],
                "--report", report_dir]
        print("+ meshcast bench " + " ".join(argv[4:]), flush=True)
        status = subprocess.call(argv) or status
    with open(os.path.join(HERE, "README.md"), "a") as f:
        f.write(MORE)
    return status


if __name__ == "__main__":
    sys.exit(main())
