"""The safetensors format, read and written without the safetensors package:

    [8 bytes: N, little-endian u64][N bytes: JSON header][data]

The header maps each tensor name to {"dtype", "shape", "data_offsets":
[begin, end]} (offsets into the data section, row-major, little-endian
values) plus an optional "__metadata__" of strings. jagrank accepts F32, BF16
and F16 tensors (the server converts them to float32 at load); this module
reads and writes the same three and refuses NaN and Inf like the server does.
Only torch is needed (no numpy), on little-endian hosts.
"""

import ctypes
import json
import os
import struct
import sys
from typing import Dict, Optional

import torch

# safetensors dtype name <-> torch dtype, bytes per element.
DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2)}
_NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
_MAX_HEADER_BYTES = 100 << 20
if sys.byteorder != "little":  # pragma: no cover
    raise ImportError("jagrank.safetensors reads and writes raw tensor memory: little-endian hosts only")


def dtype_name(dtype: torch.dtype) -> str:
    if dtype not in _NAMES:
        raise ValueError(f"dtype {dtype} is not supported (weights are F32, BF16 or F16)")
    return _NAMES[dtype]


def _tensor_bytes(t: torch.Tensor) -> bytes:
    """The raw bytes of a contiguous CPU tensor (little-endian host order)."""
    t = t.contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b""


def encode(name: str, tensor: torch.Tensor, dtype: torch.dtype = torch.float32) -> bytes:
    """The tensor's values as `dtype` (round to nearest even), little-endian
    bytes. ValueError naming the tensor if a value is NaN or Inf, before or
    after the conversion (a float32 above 65504 overflows F16)."""
    dtype_name(dtype)
    t = tensor.detach().to("cpu")
    if not torch.isfinite(t).all():
        raise ValueError(f"tensor '{name}': holds NaN or Inf; weights must be finite")
    t = t.to(torch.float32).to(dtype)
    if not torch.isfinite(t.to(torch.float32)).all():
        raise ValueError(f"tensor '{name}': a value overflows {dtype_name(dtype)} (|x| above its largest finite)")
    return _tensor_bytes(t)


def decode(name: str, dtype: str, shape, raw) -> torch.Tensor:
    """Bytes of a tensor -> a float32 torch tensor, exact for all three dtypes."""
    if dtype not in DTYPES:
        raise ValueError(f"tensor '{name}': dtype {dtype} is not supported (weights must be F32, BF16 or F16)")
    torch_dtype, size = DTYPES[dtype]
    raw = bytearray(raw)  # a fresh, aligned copy: data offsets need not be multiples of the element size
    count = len(raw) // size
    values = (torch.frombuffer(raw, dtype=torch_dtype, count=count) if count else torch.empty(0, dtype=torch_dtype))
    values = values.to(torch.float32).clone()
    finite = torch.isfinite(values)
    if not finite.all():
        bad = int((~finite).nonzero()[0])
        word = "NaN" if torch.isnan(values[bad]) else "+Inf" if values[bad] > 0 else "-Inf"
        raise ValueError(f"tensor '{name}': element {bad} is {word}: weights must be finite")
    return values.reshape(tuple(shape))


def save(path: str, tensors: Dict[str, torch.Tensor], dtype: torch.dtype = torch.float32,
         metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes `tensors` (name -> tensor) as one safetensors file, every tensor
    in `dtype`, names sorted, the data section 8-byte aligned; atomically
    (a temporary file, then a rename)."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks, offset = [], 0
    for name in sorted(tensors):
        raw = encode(name, tensors[name], dtype)
        header[name] = {"dtype": dtype_name(dtype), "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
    os.replace(tmp, path)


def load(path: str) -> Dict[str, torch.Tensor]:
    """Reads every tensor of a safetensors file as float32. ValueError naming
    the file and the tensor for a malformed header, an unsupported dtype, a
    size that disagrees with the shape, or a NaN/Inf value."""
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    where = f"weights file '{path}': "
    if len(blob) < 8:
        raise ValueError(where + f"file of {len(blob)} bytes is shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8 or n > _MAX_HEADER_BYTES:
        raise ValueError(where + f"header length {n} runs past the end of the file ({len(blob)} bytes)")
    try:
        header = json.loads(bytes(blob[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = None
    if not isinstance(header, dict):
        raise ValueError(where + "header is not a JSON object")
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        tensor = f"tensor '{name}': "
        if not isinstance(info, dict):
            raise ValueError(where + tensor + "header entry is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str):
            raise ValueError(where + tensor + "missing or non-string 'dtype'")
        if dtype not in DTYPES:
            raise ValueError(where + tensor + f"dtype {dtype} is not supported (weights must be F32, BF16 or F16)")
        if (not isinstance(shape, list) or len(shape) > 8
                or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 1 << 48 for s in shape)):
            raise ValueError(where + tensor + "missing or invalid 'shape'")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
                or offsets[0] > offsets[1]):
            raise ValueError(where + tensor + f"data_offsets {offsets} are not [begin <= end]")
        if offsets[1] > len(data):
            raise ValueError(where + tensor + f"data_offsets {offsets} run past the end of the data "
                             f"({len(data)} bytes)")
        elements = 1
        for s in shape:
            elements *= s
        need = elements * DTYPES[dtype][1]
        if offsets[1] - offsets[0] != need:
            raise ValueError(where + tensor + f"data_offsets cover {offsets[1] - offsets[0]} bytes, shape {shape} "
                             f"x {dtype} needs {need}")
        try:
            out[name] = decode(name, dtype, shape, data[offsets[0]:offsets[1]])
        except ValueError as e:
            raise ValueError(where + str(e)) from None
    return out
