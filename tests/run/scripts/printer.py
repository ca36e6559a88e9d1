"""Print numbered lines to stdout and stderr (for the output-prefix test)."""

import os
import sys

rank = os.environ["RANK"]
for i in range(int(sys.argv[1])):
    print(f"out {rank} line {i}")
    print(f"err {rank} line {i}", file=sys.stderr)
print(f"no newline at the end from {rank}", end="")
