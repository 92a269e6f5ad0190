"""The codec's inner loops, compiled when the compiled twin is installed.

``_codec`` is the pure-Python reference; ``_ccodec`` is the same file compiled by Cython when
the package was installed with a C compiler at hand. The compiled one is used when it
imports; ``ROCKETQ_NO_EXTENSIONS=1`` in the environment forces the pure one (as aiohttp's
``AIOHTTP_NO_EXTENSIONS`` does). :data:`COMPILED` says which runs.
"""

from __future__ import annotations

import os
from types import ModuleType

from . import _codec


def _load() -> ModuleType:
    if os.environ.get("ROCKETQ_NO_EXTENSIONS"):
        return _codec
    try:
        from . import _ccodec  # type: ignore[attr-defined]
    except ImportError:
        return _codec
    return _ccodec


impl = _load()
COMPILED: bool = impl is not _codec

CodecError = impl.CodecError
MAGIC_V1 = impl.MAGIC_V1
MAGIC_V2 = impl.MAGIC_V2
frame_spans = impl.frame_spans
encode_properties = impl.encode_properties
decode_properties = impl.decode_properties
property_value = impl.property_value
index_hashes = impl.index_hashes
split_batch = impl.split_batch
encode_batch = impl.encode_batch
walk = impl.walk
pulled = impl.pulled

__all__ = ["COMPILED", "MAGIC_V1", "MAGIC_V2", "CodecError", "decode_properties",
           "encode_batch", "encode_properties", "frame_spans", "impl", "index_hashes",
           "property_value", "pulled", "split_batch", "walk"]
