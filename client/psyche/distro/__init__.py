"""DisTrO: compress each client's optimizer update to a few DCT coefficients and exchange them.

Modules, bottom up: `dct_exact` (the DCT basis computed exactly, and the integer grids on which the
apply's sign decode is the same bits everywhere), `sign_bound` (that decode's fast path, a float
evaluation with a proven bound), `dct` (chunked orthonormal DCT-II), `compress` (top-k per tile,
aggregation, 1-bit signs), `payload` (the validated wire format and its commitment hash),
`optimizer` (the per-client `Distro` state machine: lookahead, generate, apply). docs/distro.md is
the contract; the module docstrings say where and why this implementation departs from the
reference.

Imports only torch, numpy and the standard library.
"""

from psyche.distro.compress import (
    DistroResult,
    aggregate,
    compress,
    decompress,
    index_width,
    pack_signs,
    sign_values,
    unpack_signs,
)
from psyche.distro.config import DistroConfig
from psyche.distro.dct import chunk_size, dct_basis, decode, decode_sign, encode, encoded_shape
from psyche.distro.optimizer import Distro, clip_grad_norm_, wire_dtype
from psyche.distro.payload import (
    FORMAT_VERSION,
    PAYLOAD_VERSION,
    Payload,
    PayloadError,
    PayloadSpec,
    TensorSpec,
    decode_payload,
    encode_payload,
    payload_hash,
)

__all__ = [
    "FORMAT_VERSION",
    "PAYLOAD_VERSION",
    "Distro",
    "DistroConfig",
    "DistroResult",
    "Payload",
    "PayloadError",
    "PayloadSpec",
    "TensorSpec",
    "aggregate",
    "chunk_size",
    "clip_grad_norm_",
    "compress",
    "dct_basis",
    "decode",
    "decode_payload",
    "decode_sign",
    "decompress",
    "encode",
    "encode_payload",
    "encoded_shape",
    "index_width",
    "pack_signs",
    "payload_hash",
    "sign_values",
    "unpack_signs",
    "wire_dtype",
]
