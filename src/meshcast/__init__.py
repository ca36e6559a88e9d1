"""meshcast: collective communication for Python.

torch.distributed's primitives (process groups, broadcast, reduce,
all-reduce, gather, all-gather, scatter, reduce-scatter, all-to-all, barrier,
send/recv, asynchronous work) for NumPy arrays and PyTorch CPU tensors, on
meshcast's own shared-memory engine::

    import meshcast as dist

    dist.init_process_group()          # under `meshcast run -n 4 job.py`
    x = np.full(4, dist.get_rank(), np.float32)
    dist.all_reduce(x)                 # every rank now holds 0+1+2+3
"""

from ._api import (
    GroupMember,
    P2POp,
    all_gather,
    all_gather_into_tensor,
    all_gather_single,
    all_reduce,
    all_to_all,
    all_to_all_single,
    barrier,
    batch_isend_irecv,
    broadcast,
    destroy_process_group,
    gather,
    get_backend,
    get_global_rank,
    get_group_rank,
    get_process_group_ranks,
    get_rank,
    get_world_size,
    group,
    init_process_group,
    irecv,
    is_available,
    is_initialized,
    isend,
    launch_env,
    new_group,
    recv,
    reduce,
    reduce_scatter,
    reduce_scatter_single,
    reduce_scatter_tensor,
    scatter,
    send,
)
from ._memory import empty, is_symmetric, zeros
from ._objects import (
    all_gather_object,
    broadcast_object_list,
    gather_object,
    recv_object_list,
    scatter_object_list,
    send_object_list,
)
from ._spawn import ProcessContext, ProcessExitedError, ProcessRaisedError, SpawnError, spawn
from .errors import (
    AuthenticationError,
    CommTimeout,
    GroupAbortedError,
    InvalidUsage,
    MeshcastError,
    MismatchError,
    PeerGoneError,
    RendezvousError,
    ShmError,
    TransportError,
)
from .group import ProcessGroup
from .ops import ReduceOp
from .work import Work

__version__ = "0.1.0"

__all__ = [
    "ProcessContext",
    "ProcessExitedError",
    "ProcessRaisedError",
    "SpawnError",
    "send_object_list",
    "scatter_object_list",
    "recv_object_list",
    "gather_object",
    "broadcast_object_list",
    "all_gather_object",
    "AuthenticationError",
    "CommTimeout",
    "GroupAbortedError",
    "GroupMember",
    "InvalidUsage",
    "MeshcastError",
    "MismatchError",
    "P2POp",
    "PeerGoneError",
    "ProcessGroup",
    "ReduceOp",
    "RendezvousError",
    "ShmError",
    "TransportError",
    "Work",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "batch_isend_irecv",
    "broadcast",
    "destroy_process_group",
    "empty",
    "gather",
    "get_backend",
    "get_global_rank",
    "get_group_rank",
    "get_process_group_ranks",
    "get_rank",
    "get_world_size",
    "group",
    "init_process_group",
    "irecv",
    "is_available",
    "is_initialized",
    "is_symmetric",
    "isend",
    "launch_env",
    "new_group",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "scatter",
    "send",
    "spawn",
    "zeros",
]
