"""Regenerate this folder's README.md and results/: one `meshcast bench` run with the peers.

Run:  python benchmarks/make_results.py [extra meshcast bench flags]
It runs the command printed at the top of README.md (every collective,
8 B .. 16 MiB in steps of 4, 2 ranks, best of 3 rounds, meshcast beside Gloo
and MPICH) and rewrites README.md, results/bench.jsonl, results/*.svg and
results/bench.html (results/bench.png too when matplotlib is installed).
Needs `pip install -e '.[test]'` (torch, mpi4py, mpich) for the peers; a
missing peer is skipped and the page says so.
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

COMMAND = ["-n", "2", "--op", "all", "-b", "8", "-e", "16M", "-f", "4", "--rounds", "3",
           "--compare", "gloo,mpi"]


def main() -> int:
    report_dir = os.path.relpath(HERE)
    argv = [sys.executable, "-m", "meshcast", "bench", *COMMAND, *sys.argv[1:],
            "--report", report_dir]
    print("+ meshcast bench " + " ".join(argv[4:]), flush=True)
    return subprocess.call(argv)


if __name__ == "__main__":
    sys.exit(main())
