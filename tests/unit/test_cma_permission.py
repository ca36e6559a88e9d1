"""cma.allow_peers: a rank declares its siblings may read its memory exactly where Yama's
relational mode would forbid them (ptrace_scope 1), and nowhere else."""

from __future__ import annotations

import ctypes

import pytest

from meshcast.transport import cma


class _Libc:
    def __init__(self, result: int) -> None:
        self.calls: list[tuple] = []
        self.result = result

    def prctl(self, *args: object) -> int:
        self.calls.append(args)
        return self.result


@pytest.mark.parametrize("scope, called", [(None, False), ("0", False), ("1\n", True),
                                           ("2", False), ("3", False)])
def test_only_the_relational_mode_gets_the_declaration(tmp_path, monkeypatch, scope, called):
    path = tmp_path / "ptrace_scope"
    if scope is not None:
        path.write_text(scope)
    libc = _Libc(0)
    monkeypatch.setattr(cma, "_libc", libc)
    assert cma.allow_peers(str(path)) == ("allowed" if called else "not needed")
    if called:
        (option, who, *rest), = libc.calls
        assert option == 0x59616D61  # PR_SET_PTRACER
        assert isinstance(who, ctypes.c_ulong) and who.value == ctypes.c_ulong(-1).value
        assert rest == [0, 0, 0]
    else:
        assert libc.calls == []


def test_a_refusal_is_reported_not_raised(tmp_path, monkeypatch):
    path = tmp_path / "ptrace_scope"
    path.write_text("1")
    monkeypatch.setattr(cma, "_libc", _Libc(-1))
    assert cma.allow_peers(str(path)).startswith("refused")
