"""Only the optional compiled helper lives here; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # optional: without a C compiler meshcast installs and runs in pure Python
        # (the tiny calls' arena round then stays in transport/arena.py).
        Extension("meshcast.transport._tiny", ["src/meshcast/transport/_tiny.c"],
                  extra_compile_args=["-O3", "-std=gnu11", "-ffp-contract=off"], optional=True),
        # optional too: without it, the across-hosts agreement's rows are posted and
        # polled through mpi4py (transport/mpi.py runs the same program).
        Extension("meshcast.transport._mpi_rows", ["src/meshcast/transport/_mpi_rows.c"],
                  extra_compile_args=["-O2", "-std=gnu11"], optional=True),
    ],
)
