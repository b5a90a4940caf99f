"""The op table. Importing this package registers every op (see :mod:`.table`)."""

from . import (  # noqa: F401
    attention,
    conv,
    decode_layer,
    decode_linear,
    decoder,
    elementwise,
    embedding,
    flash_attention,
    fused,
    indices,
    kv_cache,
    leaves,
    linalg,
    losses,
    norm,
    optim,
    reduce,
    rope,
    rope_attention,
    shape,
)
from .table import OPS, Feeds, OpDef

__all__ = ["OPS", "OpDef", "Feeds"]
