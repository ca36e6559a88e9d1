"""The machine the figures come from: a description, and its memory copy bandwidth (the limit).

On one machine every byte a collective moves goes through memory, so the
ceiling for busbw is what a plain copy achieves. :func:`copy_bandwidth`
measures it the way a rank copies (``np.copyto``, one process, best of a
few), once for a buffer far larger than the caches (the figure busbw is
compared with) and once for a buffer that stays in cache (what small
messages could reach at best). Both count the bytes once (``nbytes / t``),
as busbw does.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CopyBandwidth:
    """GB/s (1e9 bytes/s) of ``np.copyto`` for a large and a cache-sized buffer."""

    large_bytes: int
    large_gbps: float
    cached_bytes: int
    cached_gbps: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _best_copy(nbytes: int, repeats: int, min_seconds: float) -> float:
    src = np.ones(nbytes, np.uint8)
    dst = np.zeros(nbytes, np.uint8)
    np.copyto(dst, src)  # fault the pages in before timing
    best = float("inf")
    for _ in range(repeats):
        loops, elapsed = 0, 0.0
        t0 = time.perf_counter()
        while elapsed < min_seconds or loops == 0:
            np.copyto(dst, src)
            loops += 1
            elapsed = time.perf_counter() - t0
        best = min(best, elapsed / loops)
    return nbytes / best / 1e9


def copy_bandwidth(large: int = 64 << 20, cached: int = 256 << 10,
                   repeats: int = 5) -> CopyBandwidth:
    """Measure the memory copy bandwidth (best of ``repeats``) for both buffer sizes."""
    return CopyBandwidth(large, _best_copy(large, repeats, 0.05),
                         cached, _best_copy(cached, repeats, 0.01))


def _cpuinfo() -> tuple[str, int]:
    """(CPU model, physical cores) from /proc/cpuinfo; ("", 0) elsewhere."""
    model, cores = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            phys = core = ""
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and not model:
                    model = value
                elif key == "physical id":
                    phys = value
                elif key == "core id":
                    core = value
                elif not key and phys + core:
                    cores.add((phys, core))
                    phys = core = ""
            if phys + core:
                cores.add((phys, core))
    except OSError:
        pass
    return model, len(cores)


def _memory_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _caches() -> str:
    """"L1d 32K, L2 512K, L3 32768K" from sysfs (cpu0's view)."""
    base = "/sys/devices/system/cpu/cpu0/cache"

    def read(entry: str, name: str) -> str:
        with open(os.path.join(base, entry, name)) as f:
            return f.read().strip()

    out = []
    try:
        for entry in sorted(os.listdir(base)):
            if not entry.startswith("index") or read(entry, "type") == "Instruction":
                continue
            data = "d" if read(entry, "type") == "Data" else ""
            out.append(f"L{read(entry, 'level')}{data} {read(entry, 'size')}")
    except OSError:
        return ""
    return ", ".join(out)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def _mpiexec_version() -> str:
    from .peers import _mpiexec

    exe = _mpiexec()
    if not exe:
        return ""
    try:
        text = subprocess.run([exe, "--version"], capture_output=True, text=True,
                              timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    m = re.search(r"Version:\s*(\S+)", text)
    if "HYDRA" in text and m:
        return f"MPICH (Hydra) {m.group(1)}"
    first = text.strip().splitlines()
    return first[0] if first else ""


def describe() -> dict[str, Any]:
    """Facts about this machine and the software the figures depend on."""
    model, cores = _cpuinfo()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = -1.0
    return {
        "cpu": model or platform.processor() or platform.machine(),
        "logical_cpus": os.cpu_count() or 0,
        "usable_cpus": usable,
        "physical_cores": cores,
        "caches": _caches(),
        "memory_bytes": _memory_bytes(),
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "meshcast": _version("meshcast"),
        "torch": _version("torch"),
        "mpi4py": _version("mpi4py"),
        "mpich": _version("mpich"),
        "mpiexec": _mpiexec_version(),
        "load_1min": round(load, 2),
    }
