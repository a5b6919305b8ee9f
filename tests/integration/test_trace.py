"""trace=FILE on a real mount, and tierfs-sim against it (issue 31).

- test_trace_records_reads: known O_DIRECT reads through a mount with trace= are the records of
  its trace, read back with tracefmt.py (written from docs/trace-format.md): one per read, in
  the file's order of answers, with the object's size and mtime, the tier that served each
  (the store for a first read, hot for a second read of the same block) and the bytes fetched
  for it; the same object has the same id and a second file another; one handle is one
  stream; no key name is in the file, which is 0600; the stats file counts the records.
- test_trace_refusals: a trace= path holding something that is not a trace, or a short
  trace_salt file, stops the mount with one line.
- test_sim_matches_mount: a mixed workload (two tail readers over new objects larger than the
  hot tier, a replay of old objects through the throttled lagging tier, index lookups: small
  random reads near the start of old objects) on an nginx mount with trace=, then tierfs-sim
  replays the trace at the same settings: the simulated hit ratio of each memory tier is
  within 2 points of the mount's own stats, and the simulated store bytes within 5% of what
  nginx sent. The workload keeps its hits structural (a follower behind the tail, lookups of
  parts kept for lagging_ttl) rather than races of a read against a fetch finishing, which a
  loaded 2-core machine decides differently from run to run; and lagging_burst is 4 blocks,
  so that I/O-loop timers firing late lose the mount no tokens (a bucket of exactly one
  block drops what a late timer would have added, and the mount then fetches slower than
  its rate, which the simulator's exact timers do not).
"""

import json
import os
import random
import subprocess
import threading
import time
from pathlib import Path

import pytest

import harness
import lagging_util
import tracefmt
from harness import wait_until

MIB = 1 << 20
OLD = 1_700_000_000  # an mtime far older than hot_ttl


def sim_bin():
    return os.environ.get("TIERFS_SIM") or str(Path(harness.tierfs_bin()).parent / "sim" /
                                               "tierfs-sim")


def make(root, name, size, mtime=None, seed=0):
    p = Path(root) / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(random.Random(f"{seed}:{name}").randbytes(size))
    if mtime:
        os.utime(p, (mtime, mtime))
    return p


def pread_direct(fd, off, n, buf):
    got = os.preadv(fd, [memoryview(buf)[:n]], off)
    return bytes(buf[:got])


def records_after_unmount(m, path):
    assert m.unmount() is None
    return tracefmt.read(path)


def test_trace_records_reads(mount, nginx_factory, tmp_path):
    root = tmp_path / "root"
    a = make(root, "dir/alpha-key.bin", 3 * 65536 + 100)
    make(root, "dir/beta-key.bin", 2 * 65536)
    srv = nginx_factory(root)
    trace = tmp_path / "reads.trace"
    m = mount(srv.url, [f"trace={trace}", "block_size=64K", "readahead=0"])
    buf = lagging_util.aligned_buffer(65536)
    fd = os.open(m.path("dir/alpha-key.bin"), os.O_RDONLY | os.O_DIRECT)
    try:
        assert pread_direct(fd, 0, 4096, buf) == a.read_bytes()[:4096]
        assert pread_direct(fd, 8192, 4096, buf) == a.read_bytes()[8192:12288]
        assert len(pread_direct(fd, 3 * 65536, 4096, buf)) == 100  # the short last block
    finally:
        os.close(fd)
    fd = os.open(m.path("dir/beta-key.bin"), os.O_RDONLY | os.O_DIRECT)
    try:
        pread_direct(fd, 65536, 4096, buf)
    finally:
        os.close(fd)
    wait_until(lambda: lagging_util.stats(m.mnt).v("trace_records_total") >= 4, 10,
               "the trace's writer to drain the 4 reads")
    st = lagging_util.stats(m.mnt)
    assert st.v("trace_dropped_total") == 0
    hdr, reads = records_after_unmount(m, trace)

    assert hdr["block_size"] == 65536 and hdr["part"] == 0
    assert abs(hdr["start_wall_ns"] / 1e9 - time.time()) < 600
    # a record is pushed just after its answer (off the reader's wait), so the next read's may
    # come first (seen under ASan); each carries the time its read came (docs/trace-format.md)
    assert len({r["t_ns"] for r in reads}) == len(reads), reads
    reads.sort(key=lambda r: r["t_ns"])
    assert [(r["off"], r["len"]) for r in reads] == [(0, 4096), (8192, 4096), (196608, 4096),
                                                     (65536, 4096)], reads
    r0, r1, r2, r3 = reads
    assert r0["obj"] == r1["obj"] == r2["obj"] != r3["obj"]
    assert r0["ver"] == r1["ver"] and r0["stream"] == r1["stream"] == r2["stream"] != r3["stream"]
    assert r0["size"] == 3 * 65536 + 100 and r3["size"] == 2 * 65536
    assert r0["mtime"] == int(a.stat().st_mtime)
    assert (r0["tier"], r1["tier"], r2["tier"], r3["tier"]) == ("store", "hot", "store", "store")
    assert r0["fetched"] == 65536 and r1["fetched"] == 0 and r2["fetched"] == 100
    assert r0["t_ns"] < r1["t_ns"] < r2["t_ns"] < r3["t_ns"]
    # flags: 2, the first read through its handle (its stream starts); no error (1)
    assert [r["flags"] for r in reads] == [2, 0, 0, 2]
    assert all(r["lat_us"] < 30_000_000 for r in reads)
    data = trace.read_bytes()
    for word in (b"alpha", b"beta", b"dir/", b"127.0.0.1"):
        assert word not in data, f"{word!r} is in the trace"
    assert trace.stat().st_mode & 0o777 == 0o600


def test_trace_refusals(fuse, tmp_path, nginx_factory, mountpoint):
    root = tmp_path / "root"
    make(root, "x.bin", 4096)
    srv = nginx_factory(root)
    mnt = mountpoint  # a mount that should have been refused is unmounted at teardown
    precious = tmp_path / "precious"
    precious.write_text("not a trace\n")
    salt = tmp_path / "salt"
    salt.write_bytes(b"short")
    for opts, words in ((f"trace={precious}", "not a tierfs trace"),
                        (f"trace={tmp_path / 't'},trace_salt={salt}", "16 bytes")):
        rc, _, err = harness.run_tierfs([srv.url, str(mnt), "-o", opts])
        assert rc != 0 and len(err) == 1 and words in err[0], (rc, err)
        assert not harness.mounted(mnt)
    assert precious.read_text() == "not a trace\n"


# ---- the simulator against the mount ---------------------------------------------------------

SETTINGS = ("block_size=1M,hot_size=16M,lagging_size=8M,lagging_rate=24M,lagging_burst=4M,"
            "hot_ttl=600")
# nginx on loopback, as tierfs-sim's store: a GET's first byte in about half a millisecond,
# then about a GB/s
STORE = ["--store-latency=0.5ms", "--store-p99=2ms", "--store-bandwidth=1G", "--link=2G"]


def tail_readers(m, names, lag_mib, errors):
    """Two readers through each new object in turn, 1 MiB O_DIRECT reads, the second
    @lag_mib behind the first (a tail consumer and a follower)."""
    def reader(delay):
        buf = lagging_util.aligned_buffer(MIB)
        try:
            time.sleep(delay)
            for n in names:
                fd = os.open(m.path(n), os.O_RDONLY | os.O_DIRECT)
                try:
                    off = 0
                    while os.preadv(fd, [buf], off):
                        off += MIB
                        time.sleep(0.004)
                finally:
                    os.close(fd)
        except OSError as e:
            errors.append(e)
    return [threading.Thread(target=reader, args=(d,)) for d in (0, lag_mib * 0.004)]


def replay_reader(m, names, errors, rnd_reads):
    """A replay of the old objects, 1 MiB reads as fast as the limiter lets them, and index
    lookups: random 8 KiB reads in the first 256 KiB of each old object (parts of blocks,
    kept in the lagging tier: its hits)."""
    def replay():
        buf = lagging_util.aligned_buffer(MIB)
        try:
            for n in names:
                fd = os.open(m.path(n), os.O_RDONLY | os.O_DIRECT)
                try:
                    off = 0
                    while os.preadv(fd, [buf], off):
                        off += MIB
                finally:
                    os.close(fd)
        except OSError as e:
            errors.append(e)

    def random_reads():
        rng = random.Random(7)
        buf = lagging_util.aligned_buffer(8192)
        try:
            for _ in range(rnd_reads):
                n = rng.choice(names)
                fd = os.open(m.path(n), os.O_RDONLY | os.O_DIRECT)
                try:
                    os.preadv(fd, [buf], rng.randrange(1, 32) * 8192)
                finally:
                    os.close(fd)
                time.sleep(0.01)
        except OSError as e:
            errors.append(e)
    return [threading.Thread(target=replay), threading.Thread(target=random_reads)]


def ratio(h, m):
    return h / (h + m) if h + m else None


@pytest.mark.watchdog(240)
def test_sim_matches_mount(mount, nginx_factory, tmp_path):
    root = tmp_path / "root"
    new = [f"live/seg-{i}.log" for i in range(6)]
    old = [f"old/seg-{i}.log" for i in range(4)]
    for n in new:
        make(root, n, 16 * MIB)
    for n in old:
        make(root, n, 32 * MIB, mtime=OLD)
    srv = nginx_factory(root)
    trace = tmp_path / "mixed.trace"
    m = mount(srv.url, [f"trace={trace}"] + SETTINGS.split(","))
    names = set(new + old)
    mark = srv.log_mark()
    errors = []
    threads = tail_readers(m, new, 6, errors) + replay_reader(m, old, errors, 200)
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors[:3]
    srv.wait_idle()
    st = lagging_util.stats(m.mnt)
    wait_until(lambda: lagging_util.stats(m.mnt).v("trace_records_total")
               >= st.v("reads_total"), 10, "the trace to hold every read")
    st = lagging_util.stats(m.mnt)
    assert st.v("trace_dropped_total") == 0
    sent = sum(r.body_bytes for r in srv.requests(mark)
               if r.method == "GET" and r.range and r.path in names)
    _, reads = records_after_unmount(m, trace)
    assert len(reads) == st.v("reads_total")

    p = subprocess.run([sim_bin(), "--json", "-o", SETTINGS, *STORE, str(trace)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    sim = json.loads(p.stdout)
    rows = []
    for tier in ("hot", "lagging"):
        # docs/sizing.md: a read that joined a fetch under way is a hit
        got = ratio(st.v("cache_hits_total", tier) + st.v("cache_singleflight_joins_total", tier),
                    st.v("cache_misses_total", tier))
        want = sim["tiers"][tier]["hit_ratio"]
        rows.append((tier, got, want))
    print(f"\nmount vs sim: {rows}; store bytes: nginx {sent}, sim {sim['store']['bytes']}; "
          f"hot hits/misses mount {st.v('cache_hits_total', 'hot'):.0f}/"
          f"{st.v('cache_misses_total', 'hot'):.0f} sim {sim['tiers']['hot']['hits']}/"
          f"{sim['tiers']['hot']['misses']}; lagging mount "
          f"{st.v('cache_hits_total', 'lagging'):.0f}/{st.v('cache_misses_total', 'lagging'):.0f}"
          f" sim {sim['tiers']['lagging']['hits']}/{sim['tiers']['lagging']['misses']}")
    for tier, got, want in rows:
        assert got is not None and want is not None, rows
        assert abs(got - want) <= 0.02, f"{tier}: mount {got:.4f}, sim {want:.4f}"
    assert abs(sim["store"]["bytes"] - sent) <= 0.05 * sent, (sim["store"]["bytes"], sent)
