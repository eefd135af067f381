"""Read TensorFlow V2-format checkpoints (`model.ckpt-N.index` + `.data-SSSSS-of-NNNNN`) without TensorFlow.

The format, as TensorFlow's `tensor_bundle` writes it:
- `.index` is a LevelDB-style sorted table ("SSTable"). A 48-byte footer at the end holds two block
  handles (metaindex, index) and a magic number. The index block maps keys to handles of data blocks.
  Each block is followed by a 5-byte trailer: compression type (0 none, 1 Snappy) and a masked CRC32C.
  Inside a block, entries are prefix-compressed against the previous key
  (`varint shared, varint unshared, varint value_len, key suffix, value`); a fixed32 array of
  "restart points" (offsets where `shared == 0`) and its fixed32 count end the block.
- In the table, the empty key holds a `BundleHeaderProto` (num_shards, endianness); every other key is
  a variable name whose value is a `BundleEntryProto` (dtype, shape, shard_id, offset, size, crc32c).
- `.data-SSSSS-of-NNNNN` files hold the raw little-endian tensor bytes at (offset, size).

Only numpy is needed: protobuf messages are decoded by a small wire-format parser below (the three
messages have a handful of scalar fields), Snappy blocks by a small decompressor (TF compresses an
index block when Snappy saves at least 1/8 of it). bfloat16 tensors come back as float32 (exact).
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from albertlm.errors import UserError

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_TRAILER_SIZE = 5
HEADER_KEY = b""

# tensorflow/core/framework/types.proto DataType -> numpy dtype (bfloat16 is special-cased)
DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16, 6: np.int8,
          9: np.int64, 10: np.bool_, 17: np.uint16, 19: np.float16, 22: np.uint32, 23: np.uint64}
DT_STRING, DT_BFLOAT16 = 7, 14


class CheckpointError(UserError):
    """A file that is not a readable TF checkpoint, or a tensor this reader does not handle."""


# --- protobuf wire format --------------------------------------------------------------------------

def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a base-128 varint at `pos`; return (value, position after it)."""
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise CheckpointError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CheckpointError("varint longer than 64 bits")


def parse_message(buf: bytes) -> dict[int, list]:
    """Field number -> list of values (ints for varint/fixed fields, bytes for length-delimited ones)."""
    fields: dict[int, list] = {}
    pos = 0
    while pos < len(buf):
        tag, pos = read_varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            value, pos = struct.unpack_from("<Q", buf, pos)[0], pos + 8
        elif wire == 2:
            length, pos = read_varint(buf, pos)
            value, pos = bytes(buf[pos:pos + length]), pos + length
        elif wire == 5:
            value, pos = struct.unpack_from("<I", buf, pos)[0], pos + 4
        else:
            raise CheckpointError(f"unsupported protobuf wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def _last(fields: dict[int, list], number: int, default=0):
    return fields[number][-1] if number in fields else default


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# --- checksums and Snappy --------------------------------------------------------------------------

def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()
# CRC-32C is linear: the register after some bytes is `shift(register before, their length) ^ raw(bytes)`, raw being
# the register those bytes leave from 0. So a long buffer is cut into LANES equal pieces whose raw CRCs numpy
# computes side by side (slicing-by-8 with 16-bit tables: four lookups per 8 bytes of every piece), and the pieces'
# CRCs are combined by the shift operator ("zeros" of the piece length), itself a linear map of the 32-bit register
# held as four 256-entry tables (one per register byte).
_LANES = 16384                # pieces computed side by side
_LANE_BYTES = 1024            # at most this much of each piece per step (16 MiB of the buffer at a time)
_VECTOR_FROM = 4096           # shorter buffers (index blocks, biases) take the byte-at-a-time loop
_BYTE_TABLES: list | None = None     # slicing-by-8's tables: byte b followed by k zero bytes, k = 0..7 (numpy)
_WORD_TABLES: list | None = None     # the same for 16-bit values at 8-byte offsets 0, 2, 4, 6


def _tables():
    global _BYTE_TABLES, _WORD_TABLES
    if _WORD_TABLES is None:
        byte = [np.array(_CRC_TABLE, dtype=np.uint32)]
        for _ in range(7):
            byte.append(byte[0][byte[-1] & 0xFF] ^ (byte[-1] >> 8))
        value = np.arange(1 << 16, dtype=np.uint32)
        _BYTE_TABLES = byte
        _WORD_TABLES = [byte[7 - 2 * i][value & 0xFF] ^ byte[6 - 2 * i][value >> 8] for i in range(4)]
    return _BYTE_TABLES, _WORD_TABLES


def _apply(operator: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A linear map of 32-bit registers (its four 256-entry tables, `operator[k]` for register byte k) on `values`."""
    return (operator[0].take(values & 0xFF) ^ operator[1].take((values >> 8) & 0xFF)
            ^ operator[2].take((values >> 16) & 0xFF) ^ operator[3].take(values >> 24))


_ZERO_SHIFTS: dict[int, np.ndarray] = {}


def _zero_shift(length: int) -> np.ndarray:
    """The register's change over `length` zero bytes, a linear map, as four 256-entry tables (by squaring the one
    byte map: about 2 * log2(length) compositions of 1,024 values)."""
    found = _ZERO_SHIFTS.get(length)
    if found is not None:
        return found
    byte_tables, _ = _tables()
    b = np.arange(256, dtype=np.uint32)
    step = np.stack([byte_tables[0], b, b << 8, b << 16])          # one zero byte: T[r & 0xFF] ^ (r >> 8)
    result = np.stack([b, b << 8, b << 16, b << 24])               # the identity
    n = length
    while n:
        if n & 1:
            result = _apply(step, result)
        n >>= 1
        if n:
            step = _apply(step, step)
    if len(_ZERO_SHIFTS) < 64:
        _ZERO_SHIFTS[length] = result
    return result


def _raw_crc_lanes(block: np.ndarray) -> np.ndarray:
    """The raw CRC (register from 0, no final xor) of every row of `block` (uint8, rows of a multiple of 8 bytes)."""
    _, word = _tables()
    columns = np.ascontiguousarray(block.view("<u4").T)              # row 2j: bytes 8j..8j+3 of every piece
    lanes = np.zeros(block.shape[0], dtype=np.uint32)
    for j in range(0, columns.shape[0], 2):
        low = columns[j] ^ lanes
        high = columns[j + 1]
        lanes = (word[0].take(low & 0xFFFF) ^ word[1].take(low >> 16) ^ word[2].take(high & 0xFFFF)
                 ^ word[3].take(high >> 16))
    return lanes


def _combine_lanes(lanes: np.ndarray, piece: int) -> int:
    """The raw CRC of the pieces (each `piece` bytes, raw CRCs `lanes`, a power-of-two count) one after another."""
    while len(lanes) > 1:
        lanes = _apply(_zero_shift(piece), lanes[0::2]) ^ lanes[1::2]
        piece *= 2
    return int(lanes[0])


def _crc32c_loop(data, register: int) -> int:
    table = _CRC_TABLE
    for byte in data:
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli), the checksum TF and LevelDB use; `crc` continues an earlier one (`crc32c(a + b) ==
    crc32c(b, crc32c(a))`). A buffer of 4 KiB or more is cut into up to `_LANES` pieces whose CRCs numpy computes side
    by side, then combined (tens of times the byte-at-a-time loop it replaced, which took minutes for `convert
    --verify` of a large model); no C extension needed."""
    buffer = np.frombuffer(data, dtype=np.uint8)
    register, done = crc ^ 0xFFFFFFFF, 0
    while len(buffer) - done >= _VECTOR_FROM:
        lanes = min(_LANES, 1 << (((len(buffer) - done) // 8).bit_length() - 1))
        piece = min(_LANE_BYTES, (len(buffer) - done) // lanes // 8 * 8)
        block = buffer[done:done + lanes * piece].reshape(lanes, piece)
        register = int(_apply(_zero_shift(lanes * piece), np.array([register], dtype=np.uint32))[0]) \
            ^ _combine_lanes(_raw_crc_lanes(block), piece)
        done += lanes * piece
    return _crc32c_loop(buffer[done:].tobytes(), register) ^ 0xFFFFFFFF


def unmask_crc(masked: int) -> int:
    """LevelDB stores `rotate_right(crc, 15) + 0xa282ead8` so CRCs of CRCs stay distinctive."""
    rot = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def snappy_decompress(data: bytes) -> bytes:
    """Decompress a raw Snappy block (format_description.txt: a varint length, then literal and copy
    elements selected by the low two bits of each tag byte)."""
    length, pos = read_varint(data, 0)
    out = bytearray()
    while pos < len(data):
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:  # literal; lengths above 60 are stored in the next 1-4 bytes
            n = tag >> 2
            if n >= 60:
                extra = n - 59
                n = int.from_bytes(data[pos:pos + extra], "little")
                pos += extra
            n += 1
            out += data[pos:pos + n]
            pos += n
            continue
        if kind == 1:
            n, offset = 4 + ((tag >> 2) & 7), ((tag >> 5) << 8) | data[pos]
            pos += 1
        else:
            width = 2 if kind == 2 else 4
            n, offset = (tag >> 2) + 1, int.from_bytes(data[pos:pos + width], "little")
            pos += width
        if offset == 0 or offset > len(out):
            raise CheckpointError("corrupt Snappy block (bad copy offset)")
        for _ in range(n):  # byte by byte: copies may overlap their own output
            out.append(out[-offset])
    if len(out) != length:
        raise CheckpointError(f"corrupt Snappy block ({len(out)} bytes, header says {length})")
    return bytes(out)


# --- the sorted table (.index) ---------------------------------------------------------------------

def _read_handle(buf: bytes, pos: int) -> tuple[tuple[int, int], int]:
    offset, pos = read_varint(buf, pos)
    size, pos = read_varint(buf, pos)
    return (offset, size), pos


def read_block(table: bytes, handle: tuple[int, int], where: str) -> bytes:
    """A block's contents, checked against its CRC and decompressed if needed."""
    offset, size = handle
    if offset + size + BLOCK_TRAILER_SIZE > len(table):
        raise CheckpointError(f"{where}: block runs past the end of the file")
    contents = table[offset:offset + size]
    kind = table[offset + size]
    (stored,) = struct.unpack_from("<I", table, offset + size + 1)
    if crc32c(table[offset:offset + size + 1]) != unmask_crc(stored):
        raise CheckpointError(f"{where}: block checksum mismatch (corrupt file)")
    if kind == 1:
        return snappy_decompress(contents)
    if kind != 0:
        raise CheckpointError(f"{where}: unknown block compression type {kind}")
    return contents


def iterate_block(block: bytes, where: str):
    """Yield (key, value) of a block, undoing the prefix compression."""
    if len(block) < 4:
        raise CheckpointError(f"{where}: block too short")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 - 4 * num_restarts
    if end < 0:
        raise CheckpointError(f"{where}: bad restart count {num_restarts}")
    restarts = set(struct.unpack_from(f"<{num_restarts}I", block, end))
    key, pos = b"", 0
    while pos < end:
        start = pos
        shared, pos = read_varint(block, pos)
        unshared, pos = read_varint(block, pos)
        value_len, pos = read_varint(block, pos)
        if start in restarts and shared:
            raise CheckpointError(f"{where}: restart point with a shared prefix")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + value_len]
        pos += value_len


def read_table(table: bytes, where: str) -> dict[bytes, bytes]:
    """All (key, value) pairs of a LevelDB-format table held in memory."""
    if len(table) < FOOTER_SIZE:
        raise CheckpointError(f"{where}: too short to be a checkpoint index")
    footer = table[-FOOTER_SIZE:]
    if struct.unpack_from("<Q", footer, FOOTER_SIZE - 8)[0] != TABLE_MAGIC:
        raise CheckpointError(f"{where}: not a TensorFlow checkpoint index (bad magic number)")
    _, pos = _read_handle(footer, 0)  # metaindex: holds filter blocks only, which bundles never use
    index_handle, _ = _read_handle(footer, pos)
    entries: dict[bytes, bytes] = {}
    for _, handle_bytes in iterate_block(read_block(table, index_handle, where), where):
        handle, _ = _read_handle(handle_bytes, 0)
        entries.update(iterate_block(read_block(table, handle, where), where))
    return entries


# --- the tensor bundle ----------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorEntry:
    """Where one variable lives (a decoded BundleEntryProto)."""

    dtype: int          # tensorflow DataType enum value
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int         # masked CRC32C of the stored bytes
    sliced: bool        # a partitioned variable (stored as slices): not supported

    @property
    def dtype_name(self) -> str:
        if self.dtype == DT_BFLOAT16:
            return "bfloat16"
        if self.dtype == DT_STRING:
            return "string"
        return np.dtype(DTYPES[self.dtype]).name if self.dtype in DTYPES else f"DataType({self.dtype})"


def parse_entry(value: bytes) -> TensorEntry:
    fields = parse_message(value)
    shape_fields = parse_message(_last(fields, 2, b""))
    dims = tuple(_signed64(_last(parse_message(d), 1)) for d in shape_fields.get(2, []))
    return TensorEntry(dtype=_last(fields, 1), shape=dims, shard_id=_last(fields, 3),
                       offset=_last(fields, 4), size=_last(fields, 5), crc32c=_last(fields, 6),
                       sliced=7 in fields)


# the files a checkpoint prefix names: PREFIX.index, PREFIX.data-SSSSS-of-NNNNN, and TF 1's graph PREFIX.meta
COMPANION = re.compile(r"^(?P<prefix>.+)\.(index|meta|data-\d{5}-of-\d{5})$")


# TF's record of a directory's checkpoints (what tf.train.latest_checkpoint reads): `model_checkpoint_path: "..."`
STATE_FILE = "checkpoint"


def state_file_pick(state: Path) -> str | None:
    """The checkpoint (its prefix's file name) a TF `checkpoint` state file picks, or None where the file names none.
    The path in it may be absolute and stale (written on another machine, `gs://...`): only its last part counts."""
    try:
        with open(state, "rb") as f:
            text = f.read(1 << 16).decode("utf-8", errors="replace")   # a stray byte is no error
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("model_checkpoint_path:"):
            name = re.split(r"[/\\]", line.split(":", 1)[1].strip().strip('"'))[-1]
            return name or None
    return None


def companion_prefix(path: str | Path) -> Path | None:
    """The checkpoint prefix of one of its files (`model.ckpt-best.index`, `.meta`, `.data-00000-of-00001`), of the
    directory's `checkpoint` state file (the checkpoint it picks), or of the prefix with the '.' that shell completion
    stops at (`model.ckpt-best.`: its .index, .data-* and .meta files share it); None for another name."""
    path = Path(path)
    match = COMPANION.match(path.name)
    if match:
        return path.with_name(match.group("prefix"))
    if path.name == STATE_FILE and path.is_file() and not path.with_name(f"{STATE_FILE}.index").is_file():
        name = state_file_pick(path)
        return path.with_name(name) if name else None
    if path.name.endswith(".") and path.name != "." and not path.exists() \
            and Path(f"{path.with_name(path.name[:-1])}.index").is_file():
        return path.with_name(path.name[:-1])
    return None


def resolve_prefix(path: str | Path) -> Path:
    """Accept a checkpoint prefix (`.../model.ckpt-125000`), one of its files (`.index`, `.data-*`, `.meta`: what
    tab completion gives, or the prefix with the '.' it stops at), a directory holding one checkpoint (the
    `checkpoint` state file picks one when there are several), that state file itself, or a TF-Hub module's directory
    (its `variables/variables.*`)."""
    path = Path(path)
    if path.name.endswith(".index"):
        return path.with_name(path.name[: -len(".index")])
    prefix = companion_prefix(path)
    if prefix is not None and not path.is_dir() and not path.with_name(path.name + ".index").is_file():
        if not Path(f"{prefix}.index").is_file():
            if path.name == STATE_FILE:
                raise CheckpointError(f"{path}: the state file picks {prefix.name}, whose {prefix.name}.index is not "
                                      "in its directory (pass the prefix of a checkpoint that is there)")
            raise CheckpointError(f"{path}: a TF checkpoint file without its index {prefix.name}.index "
                                  "(a checkpoint is PREFIX.index + PREFIX.data-*; pass the prefix)")
        return prefix
    if path.with_name(path.name + ".index").is_file():
        return path
    if not path.is_dir():
        raise CheckpointError(f"{path}: no TF checkpoint here (expected PREFIX.index or a directory)")
    indexes = sorted(path.glob("*.index"))
    if not indexes and (path / "variables" / "variables.index").is_file():   # a TF-Hub module
        return path / "variables" / "variables"
    state = path / STATE_FILE
    picked = state_file_pick(state) if len(indexes) > 1 and state.is_file() else None
    if picked and (path / f"{picked}.index").is_file():
        return path / picked
    if len(indexes) != 1:
        found = ", ".join(p.name for p in indexes) or "none"
        stale = f" (its `checkpoint` state file picks {picked}, which is not there)" if picked else ""
        raise CheckpointError(f"{path}: expected one *.index checkpoint file, found {found}{stale}; pass the prefix")
    return indexes[0].with_name(indexes[0].name[: -len(".index")])


class TFCheckpoint:
    """Variables of a TF checkpoint: `names()`, `entries[name]` (dtype, shape), `read(name)` -> numpy."""

    def __init__(self, path: str | Path):
        self.prefix = resolve_prefix(path)
        index = Path(f"{self.prefix}.index")
        if not index.is_file():
            raise CheckpointError(f"{index}: no such checkpoint index")
        try:
            table = read_table(index.read_bytes(), str(index))
            header = parse_message(table.pop(HEADER_KEY, b""))
            self.num_shards = _last(header, 1, 1)
            if _last(header, 2) != 0:
                raise CheckpointError(f"{index}: big-endian checkpoints are not supported")
            # keys starting with a NUL byte are the slices of partitioned variables
            self.entries = {k.decode("utf-8"): parse_entry(v) for k, v in table.items() if not k.startswith(b"\x00")}
        except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:  # damage the checksums missed
            raise CheckpointError(f"{index}: corrupt checkpoint index ({exc})") from None
        except OSError as exc:
            raise CheckpointError(f"cannot read {index}: {exc.strerror or exc}") from None
        if not isinstance(self.num_shards, int) or not 1 <= self.num_shards <= 99999:
            raise CheckpointError(f"{index}: corrupt checkpoint index (num_shards {self.num_shards})")

    def names(self) -> list[str]:
        return sorted(self.entries)

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def shard_path(self, shard_id: int) -> Path:
        return Path(f"{self.prefix}.data-{shard_id:05d}-of-{self.num_shards:05d}")

    def check_data_files(self) -> None:
        """Every data file the index names is there and long enough for the variables it holds (from the index and
        the files' sizes, nothing read): a shard left behind or cut short (an interrupted download or copy) is one
        error naming the file before any tensor is read, where the import and `albertlm info` had said nothing of it
        (`info` listed the files that were there; the import failed at the first variable in them)."""
        ends: dict[int, int] = {}
        for entry in self.entries.values():
            if not entry.sliced:
                ends[entry.shard_id] = max(ends.get(entry.shard_id, 0), entry.offset + entry.size)
        for shard in sorted(set(range(self.num_shards)) | set(ends)):
            path = self.shard_path(shard)
            if not path.is_file():
                raise CheckpointError(f"data file {path} is missing (the index {self.prefix.name}.index names "
                                      f"{self.num_shards} data file{'s' if self.num_shards > 1 else ''}, "
                                      f"{self.prefix.name}.data-*-of-{self.num_shards:05d})")
            size = path.stat().st_size
            if size < ends.get(shard, 0):
                raise CheckpointError(f"{path} is truncated: {size:,} bytes where the index needs {ends[shard]:,} "
                                      "(an interrupted download or copy)")

    def read(self, name: str, verify: bool = False) -> np.ndarray:
        """The variable's value as a new numpy array; `verify` checks the stored CRC32C (a second pass over the
        bytes, at a few hundred MB/s: opt-in)."""
        entry = self.entries.get(name)
        if entry is None:
            raise CheckpointError(f"{self.prefix}: no variable named {name!r}")
        if entry.sliced:
            raise CheckpointError(f"{name}: partitioned (sliced) variables are not supported")
        if entry.dtype not in DTYPES and entry.dtype != DT_BFLOAT16:
            raise CheckpointError(f"{name}: dtype {entry.dtype_name} is not supported")
        itemsize = 2 if entry.dtype == DT_BFLOAT16 else np.dtype(DTYPES[entry.dtype]).itemsize
        if any(d < 0 for d in entry.shape) or int(np.prod(entry.shape, dtype=np.int64)) * itemsize != entry.size:
            raise CheckpointError(f"{self.prefix}.index: corrupt entry for {name} (shape {entry.shape} does not "
                                  f"fit its {entry.size} bytes)")
        data = self._read_bytes(entry, name)
        if verify and crc32c(data) != unmask_crc(entry.crc32c):
            raise CheckpointError(f"{name}: data checksum mismatch (corrupt {self.shard_path(entry.shard_id).name})")
        if entry.dtype == DT_BFLOAT16:  # bf16 is the top half of a float32: widen exactly
            bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
            return bits.view(np.float32).reshape(entry.shape)
        return np.frombuffer(data, dtype=np.dtype(DTYPES[entry.dtype]).newbyteorder("<")).reshape(entry.shape).copy()

    def _read_bytes(self, entry: TensorEntry, name: str) -> bytes:
        path = self.shard_path(entry.shard_id)
        if not path.is_file():
            raise CheckpointError(f"{name}: data file {path} is missing")
        try:
            with open(path, "rb") as f:
                f.seek(entry.offset)
                data = f.read(entry.size)
        except (OSError, OverflowError, ValueError) as exc:
            raise CheckpointError(f"{name}: cannot read {path} at offset {entry.offset} ({exc})") from None
        if len(data) != entry.size:
            raise CheckpointError(f"{name}: {path} is truncated (the index expects {entry.size} bytes at offset "
                                  f"{entry.offset})")
        return data
