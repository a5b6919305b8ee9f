"""A message broker on a tierfs mount: a producer, a tail consumer and a lagging consumer, for
tests/integration/test_broker.py (short form) and bench/bench.py's "broker" scenario.

Segments are shaped as Kafka's: `<base offset, 20 digits>.log`, `.index`, `.timeindex`, base
offsets increasing (the next segment's base is the last offset of this one + 1).

    .log        records back to back:  [offset u64][timestamp ms u64][len u32][crc32 u32][payload]
                the last record fills the segment to exactly seg_size bytes
    .index      entries (offset - base u32, position u32), one every >= index_interval bytes
                of log; then zeros up to index_size (a preallocated index, uploaded sparse)
    .timeindex  entries (timestamp u64, offset - base u32), same cadence, zeros up to index_size

Roles, each its own process (so that one's Python work does not skew another's timings), run
as `python3 broker_sim.py ROLE CONFIG.json` and writing JSON lines to WORK/ROLE.jsonl:

- producer: every `interval` seconds generates a segment and uploads .index, .timeindex, then
  .log (so a consumer that sees the .log finds its indexes) to the store: nginx's root (write
  beside it, rename in) or S3 (botocore PUT). Logs when each .log became visible at the server.
  Just before each .log goes up it sets the phase, which lasts until the next .log: the lagging
  consumer is paused for even segments ("alone") and runs for odd ones ("replay"), so the
  tail reads each segment in its phase. (Set before the segment was made, a phase could end
  before its segment was visible: on a loaded machine making and uploading one took 2.5 s of
  the 3 s, and the tail read 34 times during the replays against 874 alone.)
- tail: opens the next segment's .log by name as soon as it exists (polls open(), as a broker
  does), maps .index and .timeindex MAP_SHARED read-only, then reads the records from the
  mount: per fetch an index lookup in the map, a 1 MiB pread, each record's offset and CRC
  checked and every byte compared with the uploaded source. Then a follower (a second consumer
  at the tail) re-reads the segment with O_DIRECT, so its reads reach tierfs rather than the
  page cache; the hot tier's hits, misses and joins over that pass are its hit ratio.
- lagging: keeps every old segment open (log fd, index map) and, while not paused, serves
  random old offsets: binary search of the mapped index (a few bytes), then an 8 KiB pread of
  the log at the position found, compared with the source.

run() starts the three, waits for the producer and the tail with deadlines, always stops all
three, and returns the figures. Nothing here mounts or unmounts: the caller owns the mount.
"""

import json
import mmap
import os
import random
import struct
import sys
import time
import zlib

MIB = 1 << 20
REC = struct.Struct(">QQII")  # offset, timestamp ms, payload length, crc32(payload)
IDX = struct.Struct(">II")  # offset - base, position in the log
TIDX = struct.Struct(">QI")  # timestamp ms, offset - base
TS0 = 1_700_000_000_000

DEFAULTS = {
    "seg_size": 64 * MIB,
    "index_size": 10 * MIB,  # 0: the index files hold their entries only
    "index_interval": 4096,
    "interval": 3.0,  # seconds between segments
    "live": 8,  # segments the producer uploads while the consumers run
    "old": 4,  # segments made before, read by the lagging consumer only
    "fetch": MIB,  # the tail's read size
    "lag_read": 8192,  # the lagging consumer's log read
    "grace": 0.3,  # tail reads this soon after a phase change are not classified
    "negative_ttl": 1.0,  # the mount's, for the caller's first-byte bound
}


def seg_name(base, ext):
    return f"{base:020d}.{ext}"


def make_segment(base, p, ts_base=None):
    """(log, index, timeindex, next base): bytes of one segment starting at offset @base.
    The index files are their entries only; put() pads them to index_size."""
    size, interval = p["seg_size"], p["index_interval"]
    rnd = random.Random(base)
    log = bytearray(os.urandom(size))
    idx, tidx = bytearray(), bytearray()
    off, pos, last_indexed = base, 0, -interval
    ts = (ts_base if ts_base is not None else TS0) + base
    while pos < size:
        left = size - pos - REC.size
        n = rnd.randrange(1024, 16384)
        if left - n < REC.size + 1024:
            n = left  # the last record fills the segment
        crc = zlib.crc32(memoryview(log)[pos + REC.size:pos + REC.size + n])
        REC.pack_into(log, pos, off, ts, n, crc)
        if pos - last_indexed >= interval:
            idx += IDX.pack(off - base, pos)
            tidx += TIDX.pack(ts, off - base)
            last_indexed = pos
        pos += REC.size + n
        off += 1
        ts += 1
    return bytes(log), bytes(idx), bytes(tidx), off


# ---------------------------------------------------------------------------------------------
# stores: where the producer uploads, and where the consumers find the uploaded bytes


class DirStore:
    """nginx's root: files are written beside it (@staging, same filesystem) and renamed in,
    so the server never sends a partial file. The tail polls the .log itself by name."""

    marker = False

    def __init__(self, root, staging, prefix=""):
        self.root, self.staging, self.prefix = str(root), str(staging), prefix
        os.makedirs(os.path.join(self.root, prefix), exist_ok=True)
        os.makedirs(self.staging, exist_ok=True)

    def spec(self):
        return {"kind": "dir", "root": self.root, "staging": self.staging, "prefix": self.prefix}

    def put(self, name, data, size=None, mtime=None):
        tmp = os.path.join(self.staging, name)
        with open(tmp, "wb") as f:
            f.write(data)
            if size and size > len(data):
                f.truncate(size)  # sparse, as a preallocated index
        if mtime is not None:
            os.utime(tmp, (mtime, mtime))
        os.rename(tmp, self.source(name))

    def source(self, name):
        return os.path.join(self.root, self.prefix, name)


class S3Store:
    """An S3 bucket (s3rver): each object is first written to @staging, which stays the copy of
    what was uploaded, then PUT with botocore.

    s3rver is not atomic: it writes an object in place while the PUT streams in, and a HEAD in
    that window answers the partial size (and an MD5 of the partial bytes as ETag). Real S3
    never shows a partial object. So here a segment is announced by an empty marker object,
    <base>.uploaded, PUT after its .log (as Kafka's tiered storage announces a segment in its
    metadata topic once the upload is finished), and the tail polls the marker by name."""

    marker = True

    def __init__(self, endpoint, bucket, staging, prefix="", create=True):
        self.endpoint, self.bucket, self.staging, self.prefix = endpoint, bucket, str(staging), \
            prefix
        os.makedirs(self.staging, exist_ok=True)
        self._c = None
        if create:
            c = self.client()
            try:
                c.create_bucket(Bucket=bucket)
            except c.exceptions.BucketAlreadyOwnedByYou:
                pass

    def spec(self):
        return {"kind": "s3", "endpoint": self.endpoint, "bucket": self.bucket,
                "staging": self.staging, "prefix": self.prefix}

    def client(self):
        if self._c is None:
            import botocore.session
            from botocore.config import Config

            self._c = botocore.session.get_session().create_client(
                "s3", region_name="us-east-1", endpoint_url=self.endpoint,
                aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
                config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3},
                              proxies={}))
        return self._c

    def put(self, name, data, size=None, mtime=None):
        path = self.source(name)
        with open(path, "wb") as f:
            f.write(data)
            if size and size > len(data):
                f.truncate(size)
        with open(path, "rb") as f:
            self.client().put_object(Bucket=self.bucket, Key=self.prefix + name, Body=f)

    def source(self, name):
        return os.path.join(self.staging, name)


def store_from(spec):
    if spec["kind"] == "dir":
        return DirStore(spec["root"], spec["staging"], spec["prefix"])
    return S3Store(spec["endpoint"], spec["bucket"], spec["staging"], spec["prefix"],
                   create=False)


def put_segment(store, base, p, mtime=None, before_log=None):
    """Generate and upload one segment, .log last (@before_log, if given, is called just
    before it goes up). @return (next base, monotonic time at which the .log was visible at
    the server)."""
    log, idx, tidx, nxt = make_segment(base, p)
    isize = p["index_size"] or None
    store.put(seg_name(base, "index"), idx, isize, mtime)
    store.put(seg_name(base, "timeindex"), tidx, isize, mtime)
    if before_log:
        before_log()
    store.put(seg_name(base, "log"), log, None, mtime)
    t = time.monotonic()
    if store.marker:
        store.put(seg_name(base, "uploaded"), b"", None, mtime)
    return nxt, t


def make_old(store, p, age=30 * 86400):
    """The old segments, from offset 0: [(base, next base)]. Their mtime is @age seconds back
    (what nginx serves as Last-Modified; S3 stamps its own upload time)."""
    out, base = [], 0
    for _ in range(p["old"]):
        nxt, _ = put_segment(store, base, p, mtime=time.time() - age)
        out.append((base, nxt))
        base = nxt
    return out


# ---------------------------------------------------------------------------------------------
# the roles


class Events:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def __call__(self, **ev):
        self.f.write(json.dumps(ev) + "\n")


def read_events(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def index_entries(m, entry):
    """Number of entries in a mapped index: a preallocated index is zeros after its last entry
    (found by binary search, as a broker loading it does; entry 0 may be all zero)."""
    n = len(m) // entry.size
    lo, hi = 1, n  # the first invalid slot is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if any(m[mid * entry.size:(mid + 1) * entry.size]):
            lo = mid + 1
        else:
            hi = mid
    return lo


def index_lookup(m, entries, rel):
    """Position of the largest indexed offset <= @rel, and the number of entries read."""
    lo, hi, probes = 0, entries - 1, 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        probes += 1
        if IDX.unpack_from(m, mid * IDX.size)[0] <= rel:
            lo = mid
        else:
            hi = mid - 1
    probes += 1
    return IDX.unpack_from(m, lo * IDX.size)[1], probes


def map_ro(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    finally:
        os.close(fd)


def stats_hot(mnt):
    """(hits, misses, joins) of the hot tier from .tierfs/stats."""
    want = {'tierfs_cache_hits_total{tier="hot"}': 0,
            'tierfs_cache_misses_total{tier="hot"}': 1,
            'tierfs_cache_singleflight_joins_total{tier="hot"}': 2}
    out = [0, 0, 0]
    with open(os.path.join(mnt, ".tierfs", "stats")) as f:
        for line in f:
            k, _, v = line.rstrip("\n").rpartition(" ")
            if k in want:
                out[want[k]] = float(v)
    return out


def role_producer(cfg, ev):
    p, store = cfg["p"], store_from(cfg["store"])
    pause = os.path.join(cfg["work"], "pause")
    base = cfg["first_live"]
    t0 = time.monotonic()
    for k in range(p["live"]):
        if os.path.exists(os.path.join(cfg["work"], "stop")):
            break
        delay = t0 + k * p["interval"] - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # the producer's schedule
        def phase(replay=cfg["lagging"] and k % 2 == 1):
            if replay:
                if os.path.exists(pause):
                    os.unlink(pause)
            else:
                open(pause, "w").close()
            ev(ev="phase", t=time.monotonic(), replay=replay)

        nxt, t_vis = put_segment(store, base, p, before_log=phase)
        ev(ev="visible", base=base, next=nxt, t=t_vis)
        base = nxt
    open(pause, "w").close()
    ev(ev="phase", t=time.monotonic(), replay=False)
    ev(ev="done", t=time.monotonic())


def compare(errors, what, got, src_fd, pos):
    want = os.pread(src_fd, len(got), pos)
    if got != want:
        bad = next(i for i in range(min(len(got), len(want))) if got[i] != want[i]) \
            if len(got) == len(want) else -1
        errors.append(f"{what}: {len(got)} bytes at {pos} differ from the source "
                      f"(first difference at +{bad}, source has {len(want)})")
        return False
    return True


def tail_segment(cfg, ev, base, deadline):
    """Read segment @base through the mount. @return the next base, or None (stop/timeout)."""
    p, mnt = cfg["p"], cfg["mnt"]
    store = store_from(cfg["store"])
    name = seg_name(base, "log")
    path = os.path.join(mnt, name)
    poll = os.path.join(mnt, seg_name(base, "uploaded")) if store.marker else path
    stop = os.path.join(cfg["work"], "stop")
    while True:  # a broker polls for the segment by name
        try:
            fd = os.open(poll, os.O_RDONLY)
            if poll != path:
                os.close(fd)
                fd = os.open(path, os.O_RDONLY)
            break
        except FileNotFoundError:
            if time.monotonic() > deadline or os.path.exists(stop):
                return None
            time.sleep(0.01)
    t_open = time.monotonic()
    errors = []
    src = os.open(store.source(name), os.O_RDONLY)
    src_idx = os.open(store.source(seg_name(base, "index")), os.O_RDONLY)
    src_tidx = os.open(store.source(seg_name(base, "timeindex")), os.O_RDONLY)
    imap = tmap = None
    first_byte = None
    lat = []
    try:
        size = os.fstat(fd).st_size
        if size != os.fstat(src).st_size:
            errors.append(f"{name}: size {size} through the mount, {os.fstat(src).st_size} "
                          "uploaded")
        imap = map_ro(os.path.join(mnt, seg_name(base, "index")))
        tmap = map_ro(os.path.join(mnt, seg_name(base, "timeindex")))
        entries = index_entries(imap, IDX)
        # pass 1: the consumer, fetch after fetch from the index position of its offset
        off = base
        while True:
            pos, _ = index_lookup(imap, entries, off - base)
            t0 = time.monotonic()
            chunk = os.pread(fd, p["fetch"], pos)
            t1 = time.monotonic()
            if first_byte is None and chunk:
                first_byte = t1
            lat.append(("first", t0, t1 - t0))
            if not chunk:
                errors.append(f"{name}: end of file at {pos} before the last record")
                break
            if not compare(errors, name, chunk, src, pos):
                break
            # records from the indexed position: skip to @off, then take every whole one
            q, last_end = 0, None
            while q + REC.size <= len(chunk):
                o, _, n, crc = REC.unpack_from(chunk, q)
                if q + REC.size + n > len(chunk):
                    break
                if zlib.crc32(memoryview(chunk)[q + REC.size:q + REC.size + n]) != crc:
                    errors.append(f"{name}: bad CRC of offset {o} at {pos + q}")
                if o >= off:
                    if o != off:
                        errors.append(f"{name}: offset {o} where {off} was expected")
                    off = o + 1
                q += REC.size + n
                last_end = pos + q
            if last_end is None:
                errors.append(f"{name}: no whole record in {len(chunk)} bytes at {pos}")
                break
            if last_end >= size:
                break
        # the indexes' bytes, after the records (the first byte is the log's)
        compare(errors, seg_name(base, "index"), bytes(imap[:entries * IDX.size + 64]),
                src_idx, 0)
        tentries = index_entries(tmap, TIDX)
        compare(errors, seg_name(base, "timeindex"), bytes(tmap[:tentries * TIDX.size + 64]),
                src_tidx, 0)
        # pass 2: a follower at the tail re-reads the segment; O_DIRECT so that the reads
        # reach tierfs's hot tier instead of the page cache
        h0 = stats_hot(mnt)
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, p["fetch"])
        try:
            pos = 0
            while pos < size:
                t0 = time.monotonic()
                n = os.preadv(dfd, [buf], pos)
                t1 = time.monotonic()
                lat.append(("follow", t0, t1 - t0))
                if n <= 0:
                    errors.append(f"{name}: O_DIRECT read at {pos} returned {n}")
                    break
                if not compare(errors, name + " (O_DIRECT)", bytes(buf[:n]), src, pos):
                    break
                pos += n
        finally:
            buf.close()
            os.close(dfd)
        h1 = stats_hot(mnt)
    except OSError as e:
        errors.append(f"{name}: {e!r}")
        h0 = h1 = [0, 0, 0]
    finally:
        for m in (imap, tmap):
            if m is not None:
                m.close()
        for f in (fd, src, src_idx, src_tidx):
            os.close(f)
    ev(ev="segment", base=base, next=off, t_open=t_open, t_first_byte=first_byte,
       hot=[b - a for a, b in zip(h0, h1)], errors=errors[:5], n_errors=len(errors),
       reads=[[k, t, d] for k, t, d in lat])
    return off if not errors else None


def role_tail(cfg, ev):
    p = cfg["p"]
    base = cfg["first_live"]
    for k in range(p["live"]):
        # the producer's schedule, then time for a slow upload
        deadline = time.monotonic() + p["interval"] * 2 + 30
        nxt = tail_segment(cfg, ev, base, deadline)
        if nxt is None:
            ev(ev="stopped", base=base, t=time.monotonic())
            return
        base = nxt
    ev(ev="done", t=time.monotonic())


def role_lagging(cfg, ev):
    p, mnt = cfg["p"], cfg["mnt"]
    store = store_from(cfg["store"])
    pause = os.path.join(cfg["work"], "pause")
    stop = os.path.join(cfg["work"], "stop")
    segs = []
    for base, nxt in cfg["old"]:
        imap = map_ro(os.path.join(mnt, seg_name(base, "index")))
        segs.append({"base": base, "next": nxt, "imap": imap,
                     "entries": index_entries(imap, IDX),
                     "fd": os.open(os.path.join(mnt, seg_name(base, "log")), os.O_RDONLY),
                     "src": os.open(store.source(seg_name(base, "log")), os.O_RDONLY)})
    ev(ev="ready", t=time.monotonic())
    rnd = random.Random(cfg.get("seed", 1))
    ops = nbytes = 0
    errors = []
    while not os.path.exists(stop):
        if os.path.exists(pause):
            time.sleep(0.02)  # paused: a consumer with nothing to serve
            continue
        s = rnd.choice(segs)
        target = rnd.randrange(s["base"], s["next"])
        t0 = time.monotonic()
        try:
            pos, probes = index_lookup(s["imap"], s["entries"], target - s["base"])
            data = os.pread(s["fd"], p["lag_read"], pos)
        except OSError as e:
            errors.append(f"lagging read of {s['base']} at offset {target}: {e!r}")
            break
        t1 = time.monotonic()
        ops += 1
        nbytes += len(data) + probes * IDX.size
        compare(errors, seg_name(s["base"], "log") + " (lagging)", data, s["src"], pos)
        ev(ev="op", t=t0, dt=t1 - t0, bytes=len(data) + probes * IDX.size)
        if len(errors) > 5:
            break
    for s in segs:
        s["imap"].close()
        os.close(s["fd"])
        os.close(s["src"])
    ev(ev="done", ops=ops, bytes=nbytes, errors=errors[:5], n_errors=len(errors),
       t=time.monotonic())


ROLES = {"producer": role_producer, "tail": role_tail, "lagging": role_lagging}


# ---------------------------------------------------------------------------------------------
# the orchestrator (in the caller's process)


def pct(v, q):
    """Nearest-rank percentile of @v (None if empty)."""
    if not v:
        return None
    s = sorted(v)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


def classify(reads, phases, grace):
    """Split (kind, t, dt) reads into alone / replay by the phase they ran in entirely, leaving
    out those that started within @grace of a change."""
    out = {"alone": [], "replay": []}
    for kind, t, dt in reads:
        cur = None
        for ph in phases:
            if ph["t"] <= t:
                cur = ph
            elif ph["t"] < t + dt:
                cur = None  # changed during the read
                break
        if cur is None or t - cur["t"] < grace:
            continue
        out["replay" if cur["replay"] else "alone"].append((kind, dt))
    return out


def lagging_fetched(mnt):
    with open(os.path.join(mnt, ".tierfs", "stats")) as f:
        for line in f:
            if line.startswith('tierfs_cache_fetched_bytes_total{tier="lagging"} '):
                return float(line.split()[-1])
    return 0.0


def run(mnt, store, old, p, work, lagging=True, log=print):
    """Run producer, tail and lagging consumer against the mount @mnt of @store, whose old
    segments @old (from make_old) are already lagging. @return the figures (see the end)."""
    import subprocess

    from harness import stop_process, wait_until

    p = dict(DEFAULTS, **p)
    work = str(work)
    os.makedirs(work, exist_ok=True)
    for f in ("stop", "pause", "producer.jsonl", "tail.jsonl", "lagging.jsonl"):
        if os.path.exists(os.path.join(work, f)):
            os.unlink(os.path.join(work, f))
    open(os.path.join(work, "pause"), "w").close()
    cfg = {"p": p, "mnt": str(mnt), "store": store.spec(), "work": work, "old": old,
           "first_live": old[-1][1] if old else 0, "lagging": lagging}
    cfg_path = os.path.join(work, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    procs = {}

    def start(role):
        err = open(os.path.join(work, f"{role}.stderr"), "ab")
        procs[role] = subprocess.Popen([sys.executable, os.path.abspath(__file__), role,
                                        cfg_path], stdin=subprocess.DEVNULL, stdout=err,
                                       stderr=err, start_new_session=True)
        err.close()

    def events(role):
        return read_events(os.path.join(work, f"{role}.jsonl"))

    def alive_or_raise(role):
        if procs[role].poll() is not None and not any(e["ev"] in ("done", "stopped")
                                                      for e in events(role)):
            with open(os.path.join(work, f"{role}.stderr"), errors="replace") as f:
                raise RuntimeError(f"the {role} exited {procs[role].returncode}: "
                                   f"{f.read()[-2000:]}")

    lag0 = lagging_fetched(mnt)
    t_start = time.monotonic()
    try:
        if lagging:
            start("lagging")
            wait_until(lambda: alive_or_raise("lagging") or
                       any(e["ev"] == "ready" for e in events("lagging")), 60,
                       "the lagging consumer to open the old segments")
        start("tail")
        start("producer")
        wait_until(lambda: alive_or_raise("producer") or procs["producer"].poll() is not None,
                   p["live"] * p["interval"] + 120, "the producer to finish")
        alive_or_raise("producer")
        wait_until(lambda: procs["tail"].poll() is not None, p["interval"] * 2 + 60,
                   "the tail consumer to read the last segment")
        alive_or_raise("tail")
    finally:
        open(os.path.join(work, "stop"), "w").close()
        for role, proc in procs.items():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                stop_process(proc)
    elapsed = time.monotonic() - t_start
    if lagging:
        alive_or_raise("lagging")
    lag1 = lagging_fetched(mnt)

    pev, tev, lev = events("producer"), events("tail"), events("lagging")
    visible = {e["base"]: e["t"] for e in pev if e["ev"] == "visible"}
    phases = [e for e in pev if e["ev"] == "phase"]
    segs = [e for e in tev if e["ev"] == "segment"]
    errors = [x for e in segs for x in e["errors"]]
    ldone = next((e for e in lev if e["ev"] == "done"), None) if lagging else None
    if ldone:
        errors += ldone["errors"]
    if len(segs) < len(visible):
        errors.append(f"the tail read {len(segs)} of {len(visible)} segments uploaded")
    first = [e["t_first_byte"] - visible[e["base"]] for e in segs
             if e["t_first_byte"] is not None and e["base"] in visible]
    opened = [e["t_open"] - visible[e["base"]] for e in segs if e["base"] in visible]
    reads = [r for e in segs for r in e["reads"]]
    cls = classify(reads, phases, p["grace"])
    hot = [sum(e["hot"][i] for e in segs) for i in range(3)]
    ops = [e for e in lev if e["ev"] == "op"]
    lag_bytes = ldone["bytes"] if ldone else 0
    res = {
        "params": p, "elapsed_s": elapsed, "segments_uploaded": len(visible),
        "segments_read": len(segs), "errors": errors,
        "n_errors": sum(e["n_errors"] for e in segs) + (ldone["n_errors"] if ldone else 0),
        "upload_to_first_byte_s": first,
        "first_byte_p50_s": pct(first, 50), "first_byte_p99_s": pct(first, 99),
        "upload_to_open_s": opened, "open_p99_s": pct(opened, 99),
        "tail_reads": len(reads),
        "tail_alone_n": len(cls["alone"]), "tail_replay_n": len(cls["replay"]),
        "tail_p50_alone_ms": ms(pct([d for _, d in cls["alone"]], 50)),
        "tail_p99_alone_ms": ms(pct([d for _, d in cls["alone"]], 99)),
        "tail_p50_replay_ms": ms(pct([d for _, d in cls["replay"]], 50)),
        "tail_p99_replay_ms": ms(pct([d for _, d in cls["replay"]], 99)),
        "tail_p99_first_pass_ms": ms(pct([d for k, _, d in reads if k == "first"], 99)),
        "tail_p99_follower_ms": ms(pct([d for k, _, d in reads if k == "follow"], 99)),
        "follower_hot": {"hits": hot[0], "misses": hot[1], "joins": hot[2]},
        "hot_hit_ratio": hot[0] / sum(hot) if sum(hot) else None,
        "lagging_ops": len(ops), "lagging_bytes_read": lag_bytes,
        "lagging_fetched_bytes": lag1 - lag0,
        "lagging_p50_ms": ms(pct([e["dt"] for e in ops], 50)),
        "lagging_p99_ms": ms(pct([e["dt"] for e in ops], 99)),
    }
    res["lagging_server_per_byte"] = (res["lagging_fetched_bytes"] / lag_bytes
                                      if lag_bytes else None)
    return res


def ms(v):
    return None if v is None else v * 1000


def summary(res):
    """One paragraph of the figures."""
    def f(v, fmt="{:.1f}"):
        return "n/a" if v is None else fmt.format(v)
    return (f"{res['segments_read']}/{res['segments_uploaded']} segments, "
            f"{res['n_errors']} byte errors; upload->first byte p50/p99 "
            f"{f(res['first_byte_p50_s'], '{:.2f}')}/{f(res['first_byte_p99_s'], '{:.2f}')} s "
            f"(open by name p99 {f(res['open_p99_s'], '{:.2f}')} s); "
            f"tail read p50/p99 alone {f(res['tail_p50_alone_ms'])}/"
            f"{f(res['tail_p99_alone_ms'])} ms ({res['tail_alone_n']} reads), during replay "
            f"{f(res['tail_p50_replay_ms'])}/{f(res['tail_p99_replay_ms'])} ms "
            f"({res['tail_replay_n']} reads; p99 first pass "
            f"{f(res['tail_p99_first_pass_ms'])} ms, follower "
            f"{f(res['tail_p99_follower_ms'])} ms); follower hot hit ratio "
            f"{f(res['hot_hit_ratio'], '{:.4f}')}; lagging {res['lagging_ops']} ops, "
            f"{res['lagging_bytes_read']} bytes read, {res['lagging_fetched_bytes']:.0f} bytes "
            f"fetched = {f(res['lagging_server_per_byte'])} per byte read, op p50/p99 "
            f"{f(res['lagging_p50_ms'])}/{f(res['lagging_p99_ms'])} ms")


if __name__ == "__main__":
    role, cfg_file = sys.argv[1], sys.argv[2]
    with open(cfg_file) as fh:
        conf = json.load(fh)
    ROLES[role](conf, Events(os.path.join(conf["work"], f"{role}.jsonl")))
