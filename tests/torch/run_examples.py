"""Run several examples/torch_distributed scripts in one torch world (one launch instead of one each).

Usage: ``torchrun --nproc-per-node 4 tests/torch/run_examples.py broadcast gather ...``
(or ``meshcast run -n 4``). Each named example's ``run(rank, world_size)``
is called in turn on the default group created here with backend "meshcast",
exactly what the example's own ``__main__`` block does.
"""

import importlib.util
import pathlib
import sys

import torch.distributed as dist

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "torch_distributed"


def main() -> None:
    sys.path.insert(0, str(EXAMPLES))
    dist.init_process_group("meshcast")
    rank, size = dist.get_rank(), dist.get_world_size()
    for name in sys.argv[1:]:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.run(rank, size)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
