"""A small GGUF v3 reader and writer on numpy (F32, F16, BF16 and Q8_0 tensors; scalar and array metadata).

Tensors come back as numpy arrays in row-major order with the ggml shape reversed: a ggml {in, out} weight is a
(out, in) array, the same as a torch Linear weight.
"""
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
ALIGN = 32

# Metadata value types.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
           U64: "<Q", I64: "<q", F64: "<d"}
_NAMED = {"u8": U8, "i8": I8, "u16": U16, "i16": I16, "u32": U32, "i32": I32, "f32": F32, "bool": BOOL,
          "u64": U64, "i64": I64, "f64": F64}

# Tensor types.
T_F32, T_F16, T_Q8_0, T_BF16 = 0, 1, 8, 30


class _Buf:
    def __init__(self, data):
        self.d, self.o = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.o)
        self.o += struct.calcsize(fmt)
        return v[0]

    def string(self):
        n = self.take("<Q")
        s = bytes(self.d[self.o:self.o + n]).decode("utf-8")
        self.o += n
        return s

    def value(self, t):
        if t == STRING:
            return self.string()
        if t == ARRAY:
            et, n = self.take("<I"), self.take("<Q")
            return [self.value(et) for _ in range(n)]
        return self.take(_SCALAR[t])


def _dequant(t, raw, n):
    if t == T_F32:
        return np.frombuffer(raw, dtype="<f4", count=n).copy()
    if t == T_F16:
        return np.frombuffer(raw, dtype="<f2", count=n).astype(np.float32)
    if t == T_BF16:
        u = np.frombuffer(raw, dtype="<u2", count=n).astype(np.uint32) << 16
        return u.view(np.float32)
    if t == T_Q8_0:
        blocks = np.frombuffer(raw, dtype=np.uint8, count=n // 32 * 34).reshape(-1, 34)
        d = blocks[:, :2].copy().view("<f2").astype(np.float32)
        q = blocks[:, 2:].view(np.int8).astype(np.float32)
        return (q * d).reshape(-1)
    raise ValueError(f"tensor type {t} is not supported")


def _nbytes(t, n):
    return {T_F32: 4 * n, T_F16: 2 * n, T_BF16: 2 * n, T_Q8_0: n // 32 * 34}[t]


def read(path):
    """Returns (metadata dict, tensors dict name -> float32 array in reversed ggml shape)."""
    with open(path, "rb") as fh:
        data = memoryview(fh.read())
    b = _Buf(data)
    if bytes(data[:4]) != GGUF_MAGIC:
        raise ValueError(path + ": not a GGUF file")
    b.o = 4
    version, n_t, n_kv = b.take("<I"), b.take("<Q"), b.take("<Q")
    if version != 3:
        raise ValueError(f"{path}: GGUF version {version}")
    meta = {}
    for _ in range(n_kv):
        k = b.string()
        meta[k] = b.value(b.take("<I"))
    infos = []
    for _ in range(n_t):
        name = b.string()
        nd = b.take("<I")
        ne = [b.take("<Q") for _ in range(nd)]
        t, off = b.take("<I"), b.take("<Q")
        infos.append((name, ne, t, off))
    align = meta.get("general.alignment", ALIGN)
    base = (b.o + align - 1) // align * align
    tensors = {}
    for name, ne, t, off in infos:
        n = int(np.prod(ne))
        raw = data[base + off: base + off + _nbytes(t, n)]
        tensors[name] = _dequant(t, raw, n).reshape(list(reversed(ne)))
    return meta, tensors


def _pack_value(v):
    """(type, bytes) of a metadata value. Tuples ('u32', x) or ('i32', [..]) force an element type."""
    if isinstance(v, tuple):
        kind, x = v
        t = _NAMED[kind]
        if isinstance(x, (list, np.ndarray)):
            return ARRAY, struct.pack("<IQ", t, len(x)) + b"".join(struct.pack(_SCALAR[t], e) for e in x)
        return t, struct.pack(_SCALAR[t], x)
    if isinstance(v, bool):
        return BOOL, struct.pack("<?", v)
    if isinstance(v, int):
        return U32, struct.pack("<I", v)
    if isinstance(v, float):
        return F32, struct.pack("<f", v)
    if isinstance(v, str):
        e = v.encode("utf-8")
        return STRING, struct.pack("<Q", len(e)) + e
    if isinstance(v, list):
        if all(isinstance(e, str) for e in v):
            parts = [struct.pack("<Q", len(e.encode())) + e.encode() for e in v]
            return ARRAY, struct.pack("<IQ", STRING, len(v)) + b"".join(parts)
        if all(isinstance(e, bool) for e in v):
            return ARRAY, struct.pack("<IQ", BOOL, len(v)) + b"".join(struct.pack("<?", e) for e in v)
        return ARRAY, struct.pack("<IQ", U32, len(v)) + b"".join(struct.pack("<I", e) for e in v)
    raise TypeError(f"cannot store {type(v)} in GGUF metadata")


def _encode(arr, t):
    a = np.ascontiguousarray(arr, dtype=np.float32).reshape(-1)
    if t == T_F32:
        return a.astype("<f4").tobytes()
    if t == T_F16:
        return a.astype("<f2").tobytes()
    if t == T_Q8_0:
        blk = a.reshape(-1, 32)
        amax = np.abs(blk).max(axis=1)
        d = (amax / 127.0).astype(np.float16)
        dinv = np.where(d.astype(np.float32) > 0, 1.0 / np.maximum(d.astype(np.float32), 1e-30), 0.0)
        q = np.clip(np.round(blk * dinv[:, None]), -127, 127).astype(np.int8)
        out = np.empty((blk.shape[0], 34), dtype=np.uint8)
        out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
        out[:, 2:] = q.view(np.uint8)
        return out.tobytes()
    raise ValueError(f"cannot write tensor type {t}")


def write(path, meta, tensors):
    """meta: list of (key, value); tensors: list of (name, array in reversed ggml shape, tensor type)."""
    out = bytearray(GGUF_MAGIC + struct.pack("<IQQ", 3, len(tensors), len(meta)))
    for k, v in meta:
        t, payload = _pack_value(v)
        kb = k.encode()
        out += struct.pack("<Q", len(kb)) + kb + struct.pack("<I", t) + payload
    blobs, off = [], 0
    for name, arr, t in tensors:
        nb = name.encode()
        ne = list(reversed(arr.shape))
        out += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", n) for n in ne) + struct.pack("<IQ", t, off)
        blob = _encode(arr, t)
        blobs.append(blob)
        off += (len(blob) + ALIGN - 1) // ALIGN * ALIGN
    out += b"\0" * ((-len(out)) % ALIGN)
    for blob in blobs:
        out += blob + b"\0" * ((-len(blob)) % ALIGN)
    with open(path + ".tmp", "wb") as fh:
        fh.write(out)
    import os
    os.replace(path + ".tmp", path)
