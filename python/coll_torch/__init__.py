"""coll_torch - coll as a torch.distributed backend.

    import coll_torch                      # registers backend "coll"
    torch.distributed.init_process_group("coll")

all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, gather, scatter,
barrier and send/recv on CPU tensors run on coll; every call returns an async Work (and
Future) at once and completes in the group's worker thread, in issue order.
"""
import ctypes

import torch.distributed as dist

# The extension leaves coll's symbols to libcoll, loaded here for the whole process: the
# build tree's (written by meson into _libcoll.py), else the installed libcoll.so.0.
try:
    from ._libcoll import path as _libcoll_path
except ImportError:
    _libcoll_path = "libcoll.so.0"
_libcoll = ctypes.CDLL(_libcoll_path, mode=ctypes.RTLD_GLOBAL)

from . import _coll_torch  # noqa: E402  (after libcoll)


def _create(store, rank, size, timeout):
    return _coll_torch.create(store, rank, size, timeout)


if not hasattr(dist.Backend, "COLL"):
    dist.Backend.register_backend("coll", _create)
