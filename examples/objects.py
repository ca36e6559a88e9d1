"""Object collectives: move picklable Python objects (dicts, lists, strings) between ranks.

Run it with:  meshcast run -n 4 examples/objects.py

Arrays go through broadcast/all_gather/...; for anything else (a config
dict, a list of file names, a Python result) meshcast has torch's object
collectives. They pickle each object, send the sizes, then the bytes, so
objects may have any size and differ from rank to rank:

  broadcast_object_list   rank 0's config reaches every rank
  all_gather_object       every rank learns every rank's status
  gather_object           rank 0 collects a result from each rank
  scatter_object_list     rank 0 hands out a different work list to each rank
  send_object_list /      a message passed around a ring
  recv_object_list

Each step prints what every rank holds before and after (collected on rank 0
with gather_object) and asserts the result. Only unpickle data from ranks of
your own job: pickle runs code.
"""

import os

import meshcast as dist


def show(title, obj):
    """Print every rank's ``obj`` on rank 0, one line per rank."""
    rank, size = dist.get_rank(), dist.get_world_size()
    everyone = [None] * size if rank == 0 else None
    dist.gather_object(obj, everyone, dst=0)
    if rank == 0:
        print(f"  {title}")
        for r, o in enumerate(everyone):
            print(f"    rank {r}: {o!r}")


def step(name):
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"\n== {name}")


def main():
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"meshcast object collectives: {size} ranks")

    step("broadcast_object_list(objs, src=0): rank 0's objects replace everyone's")
    objs = [{"lr": 0.1, "epochs": 3, "model": "mlp"}, "run-42"] if rank == 0 else [None, None]
    show("before", objs)
    dist.broadcast_object_list(objs, src=0)
    show("after", objs)
    assert objs == [{"lr": 0.1, "epochs": 3, "model": "mlp"}, "run-42"], objs

    step("all_gather_object(out, obj): every rank gets every rank's object")
    status = {"rank": rank, "pid": os.getpid(), "loss": round(1 / (rank + 1), 3)}
    out = [None] * size
    show("before (obj)", status)
    dist.all_gather_object(out, status)
    show("after (the 'loss' of each entry of out)", [o["loss"] for o in out])
    assert [o["rank"] for o in out] == list(range(size)), out
    assert out[rank] == status, out

    step("gather_object(obj, out, dst=0): rank 0 collects one object per rank")
    result = f"rank {rank} counted {rank * 111} words"
    got = [None] * size if rank == 0 else None
    dist.gather_object(result, got, dst=0)
    if rank == 0:
        for line in got:
            print(f"  rank 0 holds: {line!r}")
        assert got == [f"rank {r} counted {r * 111} words" for r in range(size)], got

    step("scatter_object_list(out, work, src=0): rank r receives work[r] in out[0]")
    files = [f"part-{i:02d}.csv" for i in range(2 * size + 1)]
    work = [files[r::size] for r in range(size)] if rank == 0 else None  # uneven lists
    out = [None]
    show("before (out)", out)
    dist.scatter_object_list(out, work, src=0)
    show("after (out[0])", out[0])
    assert out[0] == files[rank::size], out

    step("send_object_list / recv_object_list: a note travels around the ring")
    note = [{"from": rank, "text": f"hello from rank {rank}"}]
    box = [None]
    if size > 1:
        nxt, prv = (rank + 1) % size, (rank - 1) % size
        # Even ranks send first, odd ranks receive first: the ring cannot
        # deadlock even when a send has to wait for its receiver.
        if rank % 2 == 0:
            dist.send_object_list(note, dst=nxt)
            sender = dist.recv_object_list(box, src=prv)
        else:
            sender = dist.recv_object_list(box, src=prv)
            dist.send_object_list(note, dst=nxt)
        assert sender == prv, sender
    else:
        box = [dict(note[0])]
    show("received from the previous rank", box[0])
    prv = (rank - 1) % size
    assert box[0] == {"from": prv, "text": f"hello from rank {prv}"}, box

    dist.barrier()
    if rank == 0:
        print("\nobject collectives OK")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
