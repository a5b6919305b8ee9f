#!/usr/bin/env python3
"""Write the seed corpus of fuzz_disk.c into tests/fuzz/corpus/disk/ (or the directory given).

    tests/fuzz/mkcorpus_disk.py [DIR]

Each seed is fuzz_disk.c's input: a flags byte, then segment files cut by b"SEG\\xff". The
segments are the disk tier's format (tiers/disk.c, format 2) for fuzz_disk's geometry
(block_size 4 KiB, 4 segments of 64 KiB): a valid one of a few records, and the corrupt and
hostile variants a crash, a bad disk or an older tierfs could leave. The replay test
(meson test fuzz-disk) runs them all; valid-* seeds are the ones whose records are recovered.
"""

import struct
import sys
from pathlib import Path

BS = 4096
SEG_SIZE = 64 << 10
NSEG = 4
HDR = 4096
REC_DATA = 4096
REC_MAGIC = 0x42524654
SEP = b"SEG\xff"

FIX = 4      # fuzz_disk: make the CRCs right
EXTRA = 8    # also write seg-0009.tfs
MODE644 = 16  # the first piece's file is 0644
PUT = 32     # put and read back a block
ASYNC = 64   # read one block again on a reader thread

CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    CRC_TABLE.append(_c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def seg_header(index, gen, version=2, block_size=BS, seg_size=SEG_SIZE, nseg=NSEG,
               magic=b"TIERFSD\0"):
    h = bytearray(magic + struct.pack("<IIQIIQI", version, block_size, seg_size, nseg, index,
                                      gen, 0))
    h += struct.pack("<I", crc32c(bytes(h)))
    return bytes(h) + bytes(HDR - len(h))


def record(gen, blk, data, hi=0x1234, lo=0x5678, good=True):
    key = struct.pack("<QQQ", hi, lo, blk)
    crc = crc32c(data, crc32c(key)) if good else 0xDEADBEEF
    h = bytearray(struct.pack("<IIQ", REC_MAGIC, len(data), gen) + key + struct.pack("<I", crc))
    h += struct.pack("<I", crc32c(bytes(h)) if good else 0)
    h += bytes(16)
    return bytes(h) + bytes(REC_DATA - 64) + data


def pad(b):
    return b + bytes(-len(b) % 4096)


def segment(index, gen, lens, blk0=0, **hdr):
    out = seg_header(index, gen, **hdr)
    for i, n in enumerate(lens):
        data = bytes((blk0 + i * 31 + j * 7) & 0xFF for j in range(n))
        rec = record(gen, blk0 + i, data)
        out += rec if i == len(lens) - 1 else pad(rec)
    return out


def seeds():
    one = segment(0, 1, [100])
    three = segment(0, 5, [1, BS, 777])
    yield "valid-one-record", bytes([0]) + one
    yield "valid-three-records", bytes([0]) + three
    yield "valid-two-segments", bytes([1]) + segment(1, 1, [50, 60]) + SEP + \
        segment(2, 2, [BS], blk0=10)
    yield "valid-four-segments-put", bytes([PUT]) + SEP.join(
        segment(i, i + 1, [200 * (i + 1)], blk0=5 * i) for i in range(NSEG))
    yield "valid-async", bytes([ASYNC]) + segment(0, 3, [BS, 10])
    yield "valid-same-key-twice", bytes([0]) + segment(0, 1, [20]) + SEP + \
        segment(1, 2, [20])
    yield "fix-crcs", bytes([FIX]) + three
    yield "empty-segment", bytes([0])
    yield "header-only", bytes([0]) + seg_header(0, 1)
    yield "header-short", bytes([0]) + seg_header(0, 1)[:30]
    yield "torn-data", bytes([0]) + three[:-300]
    yield "torn-header", bytes([0]) + three[:HDR + 40]
    yield "bad-magic", bytes([0]) + segment(0, 1, [100], magic=b"TIERFSX\0")
    yield "bad-record-crc", bytes([0]) + seg_header(0, 1) + record(1, 0, b"x" * 64,
                                                                   good=False)
    yield "other-version", bytes([PUT]) + segment(0, 1, [100], version=1)
    yield "other-block-size", bytes([0]) + segment(0, 1, [100], block_size=8192)
    yield "other-geometry", bytes([0]) + segment(0, 1, [100], nseg=8)
    yield "wrong-index", bytes([0]) + segment(3, 1, [100])
    yield "gen-zero", bytes([0]) + segment(0, 0, [100])
    yield "gen-huge-put", bytes([PUT]) + segment(0, (1 << 64) - 1, [100])
    yield "gen-huge-full-put", bytes([PUT]) + segment(0, (1 << 64) - 1, [BS] * 7)
    yield "record-other-gen", bytes([0]) + seg_header(0, 2) + record(1, 0, b"y" * 64)
    yield "record-len-zero", bytes([FIX]) + seg_header(0, 1) + record(1, 0, b"")
    big = bytearray(record(1, 0, b"z" * 64))
    struct.pack_into("<I", big, 4, 0xFFFFFFFF)
    yield "record-len-huge", bytes([FIX]) + seg_header(0, 1) + bytes(big)
    yield "ring-full-put", bytes([PUT]) + segment(0, 1, [BS] * 7)
    yield "beyond-ring", bytes([EXTRA]) + one
    yield "mode-0644", bytes([MODE644]) + one


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else \
        Path(__file__).resolve().parent / "corpus" / "disk"
    out.mkdir(parents=True, exist_ok=True)
    for name, data in seeds():
        (out / name).write_bytes(data)


if __name__ == "__main__":
    main()
