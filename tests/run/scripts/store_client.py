"""Reach the launcher-hosted store at MASTER_ADDR:MASTER_PORT; round-trip keys if possible.

Writes <out_dir>/store-<rank>.json with the rendezvous env it saw and what it read.
"""

import os
import socket
import sys
import time

from _common import write_json

out_dir = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
# Another node's store may not be up yet: retry for a while, as a real client does.
deadline = time.monotonic() + 20
while True:
    try:
        socket.create_connection(addr, timeout=10).close()
        break
    except ConnectionRefusedError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
result = {
    "connected": True,
    "env": {k: v for k, v in os.environ.items()
            if k in ("RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "WORLD_SIZE",
                     "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_PORT",
                     "MESHCAST_SECRET", "MESHCAST_RUN_ID")},
}
try:
    from meshcast.rendezvous.tcp_store import TCPStore
except ImportError:
    TCPStore = None
if TCPStore is not None:
    # No secret argument: the client must pick MESHCAST_SECRET up by itself.
    store = TCPStore(addr[0], addr[1], timeout=20)
    store.set(f"hello/{rank}", f"from {rank}")
    store.wait([f"hello/{r}" for r in range(world)])
    result["values"] = [store.get(f"hello/{r}").decode() for r in range(world)]
    # Exit barrier: node 0's launcher closes the store once its own workers
    # exit, so nobody leaves before everyone is done with it.
    if store.add("done", 1) == world:
        store.set("all-done", "1")
    store.wait(["all-done"])
    store.close()
write_json(out_dir, f"store-{rank}.json", result)
