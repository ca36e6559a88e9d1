"""``import meshcast.integrations.torch``: register the ``"meshcast"`` torch.distributed backend.

``import torch`` already does this through the ``torch.backends`` entry point
(unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``); importing this module makes it
explicit and surfaces any registration error instead of a warning::

    import meshcast.integrations.torch  # noqa: F401
    import torch.distributed as dist

    dist.init_process_group("meshcast")
"""

from __future__ import annotations

from .torch_backend import BACKEND_NAME, is_meshcast_group, register

register()

__all__ = ["BACKEND_NAME", "is_meshcast_group", "register"]
