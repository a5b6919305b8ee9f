"""A reader of tierfs's read trace (trace=FILE), written from docs/trace-format.md alone: the
tests check the mount's files with it, and so check that the document says enough.

    hdr, reads = tracefmt.read(path)
"""

import struct

MAGIC = b"TIERFSTR"
HDR = struct.Struct("<8sHHHHQIIQ16sQ")  # 64 bytes
OBJ = struct.Struct("<B3xIQQq")  # 32: 'O', ver, obj, size, mtime
READ = struct.Struct("<BBBxIQQIIII")  # 40: 'R', tier, flags, ref, t_ns, off, len, lat, fetched, stream
TIERS = {0: "hot", 1: "lagging", 2: "disk", 3: "fleet", 4: "store", 255: "none"}


def read(path):
    """(header dict, [read dict, ...]) of one trace file. A last record cut short is dropped."""
    data = open(path, "rb").read()
    magic, version, hlen, olen, rlen, tid, part, bsize, start, salt, _ = HDR.unpack_from(data)
    if magic != MAGIC or version != 1 or (hlen, olen, rlen) != (64, 32, 40):
        raise ValueError(f"{path}: not a version 1 tierfs trace")
    hdr = {"id": tid, "part": part, "block_size": bsize, "start_wall_ns": start, "salt": salt}
    objs, reads, pos = [], [], hlen
    while pos < len(data):
        kind = data[pos:pos + 1]
        if kind == b"O" and pos + olen <= len(data):
            _, ver, obj, size, mtime = OBJ.unpack_from(data, pos)
            objs.append({"obj": obj, "ver": ver, "size": size, "mtime": mtime})
            pos += olen
        elif kind == b"R" and pos + rlen <= len(data):
            _, tier, flags, ref, t, off, ln, lat, fetched, stream = READ.unpack_from(data, pos)
            reads.append(dict(objs[ref], tier=TIERS.get(tier, tier), flags=flags, t_ns=t,
                              off=off, len=ln, lat_us=lat, fetched=fetched, stream=stream))
            pos += rlen
        elif kind in (b"O", b"R"):
            break  # cut short
        else:
            raise ValueError(f"{path}: unknown record {kind!r} at byte {pos}")
    return hdr, reads
