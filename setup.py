"""Only the optional compiled helper lives here; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # optional: without a C compiler meshcast installs and runs in pure Python
        # (the tiny calls' arena round then stays in transport/arena.py).
        Extension("meshcast.transport._tiny", ["src/meshcast/transport/_tiny.c"],
                  extra_compile_args=["-O3", "-std=gnu11", "-ffp-contract=off"], optional=True),
    ],
)
