"""The shared tier against whoever can write to Redis or answer for it (issue 28, points 5, 6):
real mounts, a real nginx as the store, and either a real redis-server written by a plain
client, or a fake Redis (fakeredis.py) that answers as a hostile server would.

- with shared_key, a forged value (new bytes and a recomputed CRC-32C, written by a plain
  client), one claiming a MAC it does not have, one written by a mount without the key and one
  written with another key are all refused, counted, and never served; the block comes from
  the store, and the right value is written over the forged one;
- without shared_key the mount says, in one line, that Redis must then be trusted as much as
  the store (and a forger is believed: that is what the line warns of);
- a key file that its group or others may read, or too short, refuses the mount in one line,
  and nothing is mounted;
- a server that declares a 4 GB value, or a 50-million-element array, and streams it: the
  connection is closed after its first read, counted, tierfs's memory stays within its caches
  and a few MiB, and the reads are right, from the store;
- a server that sends a value's first bytes and then one byte now and then: the call times out
  as usual, and the connection is then closed (before, it stayed, and every later call waited
  out its timeout behind it).
"""

import os
import struct
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import corpus
import harness
import lagging_util as lu
from fakeredis import HDR, FakeRedis, frame, parse_key
from lagging_util import MIB
from test_shared import drop_caches, redis  # noqa: F401 (redis: the fixture)

BS = MIB
HOT_TTL = 3 * 86400
PREFIX = "k:"
WARNING = "shared tier without shared_key: Redis must be trusted as much as the store"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Four new 4 MiB objects behind a TimedNginx."""
    root = tmp_path_factory.mktemp("trust-store")
    rels = [f"new/t-{i}.bin" for i in range(4)]
    sha = {}
    for rel in rels:
        sha[rel] = corpus.sha256_file(corpus.build_one(root, rel, 4 * MIB, seed=29))
    srv = lu.TimedNginx(root, tmp_path_factory.mktemp("trust-nginx"))
    try:
        srv.start()
        yield SimpleNamespace(root=root, nginx=srv, rels=rels, sha=sha)
    finally:
        srv.stop()


def key_file(tmp_path, name="key", n=32, mode=0o600):
    p = tmp_path / name
    p.write_bytes(os.urandom(n))
    p.chmod(mode)
    return p


def opts(url, key=None, *more):
    return [f"block_size={BS // MIB}M", f"hot_ttl={HOT_TTL}", "readahead=0", f"shared={url}",
            f"shared_prefix={PREFIX}", "shared_timeout=200",
            *([f"shared_key={key}"] if key else []), *more]


def read_check(m, store, rel):
    assert lu.sha256_read(m.path(rel)) == store.sha[rel], f"{rel}: wrong bytes via {m.mnt}"


def wait_puts(m, n):
    harness.wait_until(lambda: lu.stats(m.mnt).v("fleet_puts_total", "fleet") >= n and
                       lu.stats(m.mnt).v("fleet_put_queued_bytes", "fleet") == 0,
                       20, f"{n} blocks written to Redis")


def block_keys(r):
    """The four block keys of the one object in Redis @r, in block order."""
    keys = [k for k in r.cmd("KEYS", PREFIX + "tfs1:*")]
    assert len(keys) == 4, keys
    return sorted(keys, key=lambda k: parse_key(k)[2])


def poisoned(value):
    """@value with POISONED!! over its data and its CRC recomputed, its MAC fields kept: what
    the audit's client did to a value in Redis."""
    _, _, hi, lo, blk, bs, n = struct.unpack("<4sIQQQII", value[:40])
    mac = struct.unpack("<I", value[44:48])[0]
    data = (b"POISONED!!" * (n // 10 + 1))[:n]
    return frame(hi, lo, blk, bs, data, mac=mac, salt=value[48:64], tag=value[64:80])


def data_of(value):
    return value[HDR:]


def test_forged_values_never_served_with_a_key(store, mount, redis, tmp_path):
    """Four wrong values in Redis, each of a kind a key must stop: POISONED!! with its CRC
    recomputed (no MAC), a keyed value rewritten the same way (its MAC kept), a value written
    by a mount without the key, and one written by a mount with another key. A mount with the
    key reads the object right, from the store, counts four rejections by the MAC, serves
    none, and writes the right values over them. (On the code before, a mount served
    POISONED!!: fleet_hits_total 1, fleet_rejected_total 0.)"""
    rel = store.rels[0]
    k1, k2 = key_file(tmp_path, "k1"), key_file(tmp_path, "k2")
    # values made by a mount without a key, then by one with another key, on a Redis of
    # their own (the same store: the same block keys)
    r2 = redis()
    c = mount(store.nginx.url, opts(r2.url()), name="c")
    read_check(c, store, rel)
    wait_puts(c, 4)
    unkeyed = r2.cmd("GET", block_keys(r2)[2])
    d = mount(store.nginx.url, opts(r2.url(), k2), name="d")
    read_check(d, store, rel)
    wait_puts(d, 4)  # D refused C's values (no MAC) and wrote its own
    assert lu.stats(d.mnt).v("fleet_mac_rejected_total", "fleet") == 4
    other_key = r2.cmd("GET", block_keys(r2)[3])
    # the fleet: A fills, the forger writes, B reads
    r = redis()
    a = mount(store.nginx.url, opts(r.url(), k1), name="a")
    read_check(a, store, rel)
    wait_puts(a, 4)
    keys = block_keys(r)
    good = [r.cmd("GET", k) for k in keys]
    plain = bytearray(good[0])
    plain[44:80] = bytes(36)  # no MAC: kind 0, salt and tag zero
    r.cmd("SET", keys[0], poisoned(bytes(plain)))
    r.cmd("SET", keys[1], poisoned(good[1]))
    r.cmd("SET", keys[2], unkeyed)
    r.cmd("SET", keys[3], other_key)
    b = mount(store.nginx.url, opts(r.url(), k1), name="b")
    assert WARNING not in "\n".join(b.stderr)
    store.nginx.wait_idle()
    mark = store.nginx.log_mark()
    read_check(b, store, rel)
    store.nginx.wait_idle()
    s = lu.stats(b.mnt)
    assert s.v("fleet_hits_total", "fleet") == 0
    assert s.v("fleet_rejected_total", "fleet") == 4
    assert s.v("fleet_mac_rejected_total", "fleet") == 4
    assert len([q for q in store.nginx.requests(mark) if q.path == rel and q.range]) == 4
    # the right values are written over the forged ones, and a third mount is served them
    wait_puts(b, 4)
    with open(store.root / rel, "rb") as f:
        src = f.read()
    for i, k in enumerate(keys):
        v = r.cmd("GET", k)
        assert data_of(v) == src[i * BS:(i + 1) * BS] and v[44] == 1
    e = mount(store.nginx.url, opts(r.url(), k1), name="e")
    drop_caches()
    read_check(e, store, rel)
    assert lu.stats(e.mnt).v("fleet_hits_total", "fleet") == 4


def test_without_a_key_the_mount_warns(store, mount, redis):
    """Without shared_key a value is checked by its CRC only, which stops accidents, not a
    forger: the mount says so at start, in one line. And it is right to: a forged value with
    its CRC recomputed is served (docs/security.md, "The fleet tier")."""
    rel = store.rels[1]
    r = redis()
    a = mount(store.nginx.url, opts(r.url()), name="a")
    assert [x for x in a.stderr if WARNING in x] == [f"tierfs: {WARNING}"], a.stderr
    read_check(a, store, rel)
    wait_puts(a, 4)
    k = block_keys(r)[0]
    r.cmd("SET", k, poisoned(r.cmd("GET", k)))
    b = mount(store.nginx.url, opts(r.url()), name="b")
    with open(b.path(rel), "rb") as f:
        assert f.read(10) == b"POISONED!!"
    # (the kernel's readahead may have asked for the next block too: a hit as well)
    assert lu.stats(b.mnt).v("fleet_hits_total", "fleet") >= 1
    assert lu.stats(b.mnt).v("fleet_rejected_total", "fleet") == 0


@pytest.mark.parametrize("mode,n,msg", [
    (0o640, 32, "group or others may read or write it (mode 0640): chmod 600 it"),
    (0o604, 32, "group or others may read or write it (mode 0604): chmod 600 it"),
    (0o620, 32, "group or others may read or write it (mode 0620): chmod 600 it"),
    (0o600, 31, "31 bytes; a key is 32 to 4096 bytes"),
    (0o600, 4097, "more than 4096 bytes; a key is 32 to 4096 bytes"),
    (None, 0, "No such file or directory"),
])
def test_key_file_refused(fuse, tmp_path, mode, n, msg):
    """A key others may read is a key a forger may have: refused (as ssh refuses such a
    private key), in one line, with nothing mounted; likewise a key too short or too long,
    or none at all."""
    key = key_file(tmp_path, n=n, mode=mode) if mode is not None else tmp_path / "none"
    store = tmp_path / "store"
    store.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    harness.Mount.registry.append(str(mnt))
    rc, _, err = harness.run_tierfs(["file://" + str(store), str(mnt), "-o",
                                     f"shared=redis://127.0.0.1:1,shared_key={key}"])
    assert rc != 0
    assert not harness.mounted(mnt)
    assert len(err) == 1 and err[0].startswith(f"tierfs: shared_key={key}: ") and msg in err[0], err


# ---------------------------------------------------------------------------------------------
# a fake Redis that answers as a hostile server would


def vm_rss(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class RssWatch:
    """VmRSS of @pid every 20 ms until stopped: the highest seen. Past @limit bytes it stops
    @fake at once (so the code before, which buffered without bound, fails the test without
    taking the machine's memory with it)."""

    def __init__(self, pid, fake, limit):
        self.pid, self.fake, self.limit = pid, fake, limit
        self.peak = vm_rss(pid)
        self.done = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, vm_rss(self.pid))
            if self.peak > self.limit:
                self.fake.stop()
                return
            time.sleep(0.02)

    def stop(self):
        self.done.set()
        self.t.join()
        return self.peak


def test_fake_server_forged_values_refused(store, mount, tmp_path):
    """A server that answers every GET with a well-framed value of the block asked for, its
    data POISONED!! and its CRC right (and, for half the blocks, a MAC claimed with a made-up
    salt and tag): with shared_key none is served."""
    rel = store.rels[2]
    fake = FakeRedis("forge", size=4 * MIB)
    claimed = {}

    def forge(key, size):
        if key not in claimed:  # made once: CRC-32C in Python takes ~0.1 s a MiB
            hi, lo, blk, bs = parse_key(key)
            data = (b"POISONED!!" * (bs // 10 + 1))[:bs]
            claimed[key] = frame(hi, lo, blk, bs, data, mac=blk % 2, salt=os.urandom(16),
                                 tag=os.urandom(16)) if blk % 2 else frame(hi, lo, blk, bs,
                                                                           data)
        return claimed[key]

    fake.forge = forge
    try:
        m = mount(store.nginx.url, opts(fake.url(), key_file(tmp_path)), name="m")
        mark = store.nginx.log_mark()
        read_check(m, store, rel)
        store.nginx.wait_idle()
        s = lu.stats(m.mnt)
        assert fake.gets >= 4
        assert s.v("fleet_hits_total", "fleet") == 0
        assert s.v("fleet_mac_rejected_total", "fleet") == 4
        assert len([q for q in store.nginx.requests(mark) if q.path == rel and q.range]) == 4
    finally:
        fake.stop()


@pytest.mark.watchdog(120)
@pytest.mark.parametrize("mode", ["bigbulk", "bigarray"])
def test_fake_server_huge_reply_is_refused_before_it_is_buffered(store, mount, mode):
    """A server answers a GET with "$4000000000" (or "*50000000") and streams: the audit saw
    VmRSS go from 4 MB to 1.6 GB in 6 s (hot_size=8M, lagging_size=8M), and stay. Now the
    declaration is refused after the read that brought it: the connection is closed (the
    server sees it), counted, memory stays within the caches and a few MiB, and the reads
    come from the store, right."""
    rel = store.rels[3]
    fake = FakeRedis(mode, stream_cap=2 << 30)
    try:
        m = mount(store.nginx.url, opts(fake.url(), None, "hot_size=8M", "lagging_size=8M",
                                        "shared_timeout=50"), name="m")
        base = vm_rss(m.pids[0])
        limit = base + 16 * MIB + 100 * MIB
        watch = RssWatch(m.pids[0], fake, limit)
        try:
            mark = store.nginx.log_mark()
            read_check(m, store, rel)
            harness.wait_until(lambda: fake.closed_by_client >= 1 or fake.stopped.is_set(), 10,
                               "tierfs to close the connection")
            time.sleep(1.0)  # and memory stays down while the server would go on
        finally:
            peak = watch.stop()
        assert peak <= limit, f"VmRSS went from {base >> 20} MiB to {peak >> 20} MiB"
        assert peak - base < 16 * MIB + 64 * MIB, f"{base >> 20} -> {peak >> 20} MiB"
        assert fake.closed_by_client >= 1
        assert fake.sent < 64 * MIB, f"{fake.sent >> 20} MiB streamed before the close"
        s = lu.stats(m.mnt)
        assert s.v("fleet_bad_replies_total", "fleet") >= 1
        assert s.v("fleet_errors_total", "fleet") >= 1
        assert s.v("fleet_hits_total", "fleet") == 0
        store.nginx.wait_idle()
        assert len([q for q in store.nginx.requests(mark) if q.path == rel and q.range]) == 4
    finally:
        fake.stop()


@pytest.mark.watchdog(120)
def test_fake_server_dribbling_a_reply_is_closed(store, mount):
    """A server sends a value's length, then a byte every 20 ms, for ever. The call is answered
    (-ETIMEDOUT) within its timeout and the three more that bytes earn it, and the read goes to
    the store; then the connection is closed and counted. Before, it stayed: the server held
    both of its GET places, never earned a strike (it was sending), and every later GET waited
    out four timeouts behind it, for ever."""
    rel = store.rels[1]
    fake = FakeRedis("dribble", dribble_s=0.02)
    try:
        m = mount(store.nginx.url, opts(fake.url(), None, "shared_timeout=50"), name="m")
        t0 = time.monotonic()
        with open(m.path(rel), "rb", buffering=0) as f:
            assert len(f.read(4096)) == 4096
        first = time.monotonic() - t0
        assert first < 4 * 0.05 + 1.0, f"the first read took {first:.2f} s"
        harness.wait_until(lambda: fake.closed_by_client >= 1, 5,
                           "tierfs to close the dribbling connection")
        read_check(m, store, rel)
        s = lu.stats(m.mnt)
        assert s.v("fleet_bad_replies_total", "fleet") >= 1
        assert s.v("fleet_timeouts_total", "fleet") >= 1
        assert s.v("fleet_hits_total", "fleet") == 0
    finally:
        fake.stop()
