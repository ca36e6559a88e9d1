"""A one-line progress bar on stderr for long sweeps; silent when stderr is not a terminal."""

from __future__ import annotations

import shutil
import sys
import time
from typing import IO, Any

from .report import human_bytes


class Progress:
    """``[gloo] all_gather 1 MiB  [######......]  45/297  0:12``, redrawn at most 10 times a second.

    Args:
        total: records expected over the whole invocation.
        stream: where to draw (stderr).
        enabled: draw at all; default: only when ``stream`` is a terminal, so
            logs and pipes never get carriage returns.
    """

    def __init__(self, total: int, stream: IO[str] | None = None,
                 enabled: bool | None = None) -> None:
        self.total = max(1, total)
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.enabled = isatty() if enabled is None else enabled
        self.done = 0
        self.label = ""
        self.start = time.monotonic()
        self._drawn = 0.0
        self._width = 0

    def begin(self, label: str) -> None:
        """Show ``label`` (e.g. which library is starting) without advancing."""
        self.label = label
        self._draw(force=True)

    def advance(self, rec: dict[str, Any], library: str) -> None:
        """Count one record and show what it was."""
        self.done += 1
        self.label = f"[{library}] {rec['op']} {human_bytes(rec['requested_size'])}"
        self._draw()

    def skip(self, count: int) -> None:
        """Count records that will not come (a library skipped or stopped early)."""
        self.done += count
        self._draw()

    def close(self) -> None:
        """Erase the bar so the tables that follow start on a clean line."""
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
        self._width = 0

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._drawn < 0.1 and self.done < self.total:
            return
        self._drawn = now
        cols = shutil.get_terminal_size((80, 20)).columns
        elapsed = int(now - self.start)
        tail = f" {min(self.done, self.total)}/{self.total}  {elapsed // 60}:{elapsed % 60:02d}"
        bar_width = max(10, min(30, cols - len(self.label) - len(tail) - 6))
        filled = bar_width * min(self.done, self.total) // self.total
        text = f"{self.label}  [{'#' * filled}{'.' * (bar_width - filled)}]{tail}"[:cols - 1]
        pad = max(0, self._width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._width = len(text)
