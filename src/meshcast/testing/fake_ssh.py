#!/usr/bin/env python3
"""An ssh stand-in that "logs in" to an emulated host (:mod:`meshcast.testing.emuhosts`).

    fake_ssh.py [--state DIR] [ssh options] HOST COMMAND...

HOST is a host name (``mct-h1``, also ``user@mct-h1``) or its address (10.232.0.2).
ssh's options are accepted and ignored (-x, -T, -o OPT, -p PORT, -l USER, -i FILE ...).
As ssh does, the words of COMMAND are joined with spaces and run by ``sh -c`` on the
host (so ``fake_ssh.py h 'echo $HOSTNAME'`` and ``fake_ssh.py h echo '$HOSTNAME'`` both
expand on the host). The command keeps this process's environment and standard streams,
and this process *becomes* it (exec), so signals and exit status pass straight through.

The hosts are found in DIR (``--state``; the script EmulatedHosts writes at
/run/meshcast-emuhosts/PREFIX/ssh passes it), else ``$MESHCAST_EMUHOSTS_STATE``, else
any /run/meshcast-emuhosts/*/config.json that knows HOST. Standard library only.
Set ``MESHCAST_FAKE_SSH_LOG=FILE`` to append every call's argv to FILE.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

STATE_ROOT = Path("/run/meshcast-emuhosts")
# ssh options that take a value (OpenSSH's list); all other -X flags take none.
_WITH_VALUE = set("BbcDEeFIiJLlmOopQRSWw")


def _die(msg: str) -> None:
    print(f"fake_ssh: {msg}", file=sys.stderr)
    sys.exit(255)  # what ssh exits with when it cannot connect


def parse(argv: list[str]) -> tuple[str | None, str, list[str]]:
    """``(state_dir, host, command_words)`` from an ssh-like command line."""
    state = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--state":
            state = argv[i + 1]
            i += 2
            continue
        if a.startswith("--state="):
            state = a.split("=", 1)[1]
            i += 1
            continue
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        # a cluster of flags like -xT, or -oOpt=val / -p22 (value stuck on), or -o Opt
        j = 1
        while j < len(a):
            if a[j] in _WITH_VALUE:
                if j == len(a) - 1:
                    i += 1  # the value is the next word
                break
            j += 1
        i += 1
    if i >= len(argv):
        _die("no host given")
    host = argv[i].rsplit("@", 1)[-1]
    return state, host, argv[i + 1:]


def _configs(state: str | None) -> list[Path]:
    if state:
        return [Path(state) / "config.json"]
    env = os.environ.get("MESHCAST_EMUHOSTS_STATE")
    if env:
        return [Path(env) / "config.json"]
    return sorted(STATE_ROOT.glob("*/config.json"))


def main(argv: list[str]) -> None:
    log = os.environ.get("MESHCAST_FAKE_SSH_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(argv) + "\n")
    state, host, words = parse(argv)
    for cfg_path in _configs(state):
        try:
            cfg = json.loads(cfg_path.read_text())
        except (OSError, ValueError):
            continue
        addrs = cfg["hosts"]
        name = host if host in addrs else next((h for h, a in addrs.items() if a == host), None)
        if name is None:
            continue
        d = cfg_path.parent
        command = " ".join(words) if words else "exec ${SHELL:-/bin/sh} -l"
        prefix = [cfg["ip"], "netns", "exec", name, cfg["nsenter"], f"--uts={d / (name + '.uts')}",
                  "--"]
        if cfg.get("private_shm"):
            # as hosts.host_exec_argv: bind this host's /dev/shm, then run the command
            argvx = prefix + ["sh", "-c", 'mount --bind "$0" /dev/shm && exec sh -c "$1"',
                              str(d / f"{name}.shm"), command]
        else:
            argvx = prefix + ["sh", "-c", command]
        if os.environ.get("MESHCAST_FAKE_SSH_KEEP_ENV") != "1":
            # what sshd gives a session: a login environment, none of the caller's variables
            keep = {k: os.environ[k] for k in ("HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM")
                    if k in os.environ}
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", **keep}
            os.execve(argvx[0], argvx, env)
        os.execv(argvx[0], argvx)
    _die(f"ssh: Could not resolve hostname {host}: no emulated host of that name or address "
         f"(state: {state or os.environ.get('MESHCAST_EMUHOSTS_STATE') or STATE_ROOT})")


if __name__ == "__main__":
    main(sys.argv[1:])
