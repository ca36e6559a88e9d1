"""Only the optional compiled helpers live here; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # optional: without it a group's FIFO claims the idle group in Python (_fifo.py)
        Extension("meshcast._claim", ["src/meshcast/_claim.c"],
                  extra_compile_args=["-O3", "-std=gnu11"], optional=True),
        # optional: without it, float16 and bfloat16 reductions convert their working
        # copies with NumPy (buffers.py), several times slower
        Extension("meshcast._halves", ["src/meshcast/_halves.c"],
                  depends=["src/meshcast/transport/_fold.h"],
                  extra_compile_args=["-O3", "-std=gnu11", "-ffp-contract=off"], optional=True),
        # optional: without a C compiler meshcast installs and runs in pure Python
        # (the tiny calls' arena round then stays in transport/arena.py).
        Extension("meshcast.transport._tiny", ["src/meshcast/transport/_tiny.c"],
                  depends=["src/meshcast/transport/_fold.h", "src/meshcast/transport/_copy.h"],
                  extra_compile_args=["-O3", "-std=gnu11", "-ffp-contract=off"], optional=True),
        # optional too: without it, a small blocking send or receive on one host moves
        # its bytes through the ring in Python (transport/shm.py).
        Extension("meshcast.transport._rings", ["src/meshcast/transport/_rings.c"],
                  depends=["src/meshcast/transport/_copy.h"],
                  extra_compile_args=["-O3", "-std=gnu11"], optional=True),
        # optional too: without it, mpi4py runs the across-hosts agreement's exchange
        # of rows on persistent requests (transport/mpi_rows.py).
        Extension("meshcast.transport._mpi_rows", ["src/meshcast/transport/_mpi_rows.c"],
                  depends=["src/meshcast/transport/_fold.h", "src/meshcast/transport/_copy.h"],
                  extra_compile_args=["-O3", "-std=gnu11", "-ffp-contract=off"], optional=True),
    ],
)
