"""coll_torch - coll as a torch.distributed backend.

    import coll_torch                      # registers backend "coll"
    torch.distributed.init_process_group("coll")

all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, gather, scatter,
barrier, the coalesced all-reduce and all-gather, and send/recv on CPU tensors run on coll;
every call returns an async Work (and Future) at once; the group's worker thread runs the
collectives in issue order. Reduce ops: SUM, PRODUCT, MIN, MAX, AVG, and BAND, BOR, BXOR on
integer and bool tensors.

send/recv match by source and tag as gloo's do (recv(src=None) takes the first matching
message from any rank) and never share the collectives' queue. The group's timeout
(init_process_group(timeout=...)) bounds every wait unless COLL_TIMEOUT_MS is set. A
peer's death raises RuntimeError (coll's message) on every rank within milliseconds,
whatever the timeout; torchrun --max-restarts then starts a fresh group (docs/dropin.md).

DDP communication hook: each gradient bucket through coll's quantized all-reduce,

    state = coll_torch.QuantHookState("int8")        # fp16, bf16, int8, e4m3, e5m2, int4, ...
    ddp_model.register_comm_hook(state, coll_torch.quantized_hook)

with error feedback kept per bucket across steps (feedback=False turns it off); codec
"fp32" is DDP's own averaging all-reduce, for comparison. bytes_sent() reads what this
rank's comm has sent so far.
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

# coll_quant_codec_t's values (include/coll.h).
CODECS = {"fp16": 0, "bf16": 1, "int8": 2, "e4m3": 3, "e5m2": 4, "int4": 5, "e3m0": 6,
          "sign1": 7}


def _create(store, rank, size, timeout):
    return _coll_torch.create(store, rank, size, timeout)


if not hasattr(dist.Backend, "COLL"):
    dist.Backend.register_backend("coll", _create)


def _group(group):
    return group if group is not None else dist.distributed_c10d._get_default_group()


def bytes_sent(group=None):
    """Payload bytes this rank's coll comm has sent (collectives; point to point excluded),
    read after every operation issued before."""
    return _coll_torch.bytes_sent(_group(group))


def timeout_ms(group=None):
    """The deadline the group's waits run under: COLL_TIMEOUT_MS if set, else the group's
    timeout."""
    return _coll_torch.timeout_ms(_group(group))


class QuantHookState:
    """State of quantized_hook: codec (a key of CODECS, or "fp32"), block (elements per
    scale), feedback (error feedback per bucket), process_group (None: the default)."""

    def __init__(self, codec="int8", feedback=True, block=256, process_group=None):
        if codec != "fp32" and codec not in CODECS:
            raise ValueError("codec %r: one of fp32, %s" % (codec, ", ".join(CODECS)))
        self.codec = codec
        self.feedback = feedback
        self.block = block
        self.process_group = process_group

    # DDP pickles hook states with the model in some paths; the group is not picklable.
    def __getstate__(self):
        d = dict(self.__dict__)
        d["process_group"] = None
        return d


def _first(fut):
    return fut.value()[0]


def quantized_hook(state, bucket):
    """DistributedDataParallel communication hook: the bucket's gradients averaged over the
    group through coll_allreduce_quantized. Returns a torch.futures.Future of the bucket."""
    pg = _group(state.process_group)
    buf = bucket.buffer()
    if state.codec == "fp32":
        # what DDP does without a hook: scale by 1 / size (a multiply, not a division:
        # the bits differ where size is not a power of two), then sum
        buf.mul_(1.0 / pg.size())
        return dist.all_reduce(buf, group=pg, async_op=True).get_future().then(_first)
    work = _coll_torch.allreduce_quantized(pg, buf, CODECS[state.codec], state.block,
                                           bucket.index(), state.feedback)
    return work.get_future().then(_first)
