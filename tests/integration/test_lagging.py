"""The lagging tier, end to end: tierfs over a real nginx whose files have mtimes in the past
("old" objects, read through the lagging tier) or now ("new" objects, the hot tier).

- the rate limiter holds lagging_rate, measured at the server (nginx's timed access log), also
  with blocks larger than the burst, short blocks, and lagging_ops;
- a replay of old objects neither evicts nor slows a tail reader's hot working set, whether it
  runs unthrottled, queued behind the limiter, or holding connections to a slow server;
- a reader killed while throttled goes away promptly;
- lagging_rate, hot_ttl change live through setxattr; bad values are refused with EINVAL;
- the stats file agrees with what the server sent; the xattrs and the control directory;
- lagging files do not keep the page cache (each open reaches tierfs), hot files keep it;
  lagging blocks expire.

Every mount uses hot_ttl = HOT_TTL (days), so the "new" objects written when the module starts
stay hot however long the run takes, and "old" objects are OLD_AGE (weeks) old.

Rates are measured over windows of time.monotonic() (stats) or of nginx's $msec (the server's
own clock); every wait for a condition polls it against a deadline.
"""

import errno
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

import corpus
import harness
import lagging_util as lu
from lagging_util import MIB

HOT_TTL = 3 * 86400
OLD_AGE = 30 * 86400
TTL_AGE = 600  # ttl/*.bin: hot under HOT_TTL, lagging under hot_ttl=60
BASE = ["block_size=1M", f"hot_ttl={HOT_TTL}"]

N_OLD, OLD_SIZE = 32, 8 * MIB  # 256 MiB of old segments
N_NEW, NEW_SIZE = 32, MIB  # a 32 MiB hot working set
N_SMALL, SMALL_SIZE = 200, 100_000  # old one-block objects, shorter than a block
MIXED_NEW = {"mixed/new-1m.bin": MIB, "mixed/new-2.5m.bin": 5 * MIB // 2,
             "mixed/new-3m17.bin": 3 * MIB + 17}
MIXED_OLD = {"mixed/old-2m5.bin": 2 * MIB + 5, "mixed/old-1m-1.bin": MIB - 1,
             "mixed/old-5m.bin": 5 * MIB}


def _conftest_servers():
    """conftest's list of servers for its atexit safety net, if it is loaded."""
    mod = sys.modules.get("conftest")
    return getattr(mod, "_servers", None)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A directory of old and new objects served by a TimedNginx. Attributes: root, nginx,
    old / new / small (lists of relative paths), sizes {rel: size}, sha {rel: sha256}."""
    root = tmp_path_factory.mktemp("lagging-store")
    now = time.time()
    sizes, mtimes = {}, {}
    old = [f"old/seg-{i:02d}.bin" for i in range(N_OLD)]
    new = [f"new/hot-{i:02d}.bin" for i in range(N_NEW)]
    for rel in old:
        sizes[rel], mtimes[rel] = OLD_SIZE, now - OLD_AGE
    for rel in new:
        sizes[rel], mtimes[rel] = NEW_SIZE, now
    for rel, n in MIXED_NEW.items():
        sizes[rel], mtimes[rel] = n, now
    for rel, n in MIXED_OLD.items():
        sizes[rel], mtimes[rel] = n, now - OLD_AGE
    for rel in ("ttl/a.bin", "ttl/b.bin"):
        sizes[rel], mtimes[rel] = 2 * MIB, now - TTL_AGE
    small = [f"small/s-{i:03d}.bin" for i in range(N_SMALL)]
    for rel in small:
        sizes[rel], mtimes[rel] = SMALL_SIZE, now - OLD_AGE
    sha = {}
    for rel, n in sizes.items():
        p = corpus.build_one(root, rel, n, seed=11)
        os.utime(p, (mtimes[rel], mtimes[rel]))
        sha[rel] = corpus.sha256_file(p)
    srv = lu.TimedNginx(root, tmp_path_factory.mktemp("lagging-nginx"))
    servers = _conftest_servers()
    if servers is not None:
        servers.append(srv)
    try:
        srv.start()
        yield SimpleNamespace(root=root, nginx=srv, old=old, new=new, small=small, sizes=sizes,
                              sha=sha)
    finally:
        srv.stop()


def report(record_property, **kv):
    """Numbers a run measured: in the junit XML, and on stdout (pytest -s, or on failure)."""
    for k, v in kv.items():
        record_property(k, v)
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in kv.items()))


def read_files(m, rels, sha, threads=1):
    """Read the objects @rels of mount @m to their ends (plain 1 MiB reads), @threads at once,
    checking their bytes against @sha. Return the bytes read."""
    paths = [(m.path(r), r) for r in rels]
    errors, total = [], [0]
    lock = threading.Lock()

    def worker(mine):
        try:
            for p, rel in mine:
                got = lu.sha256_read(p)
                if got != sha[rel]:
                    errors.append(f"{rel}: wrong bytes through the mount")
                with lock:
                    total[0] += os.stat(p).st_size
        except BaseException as e:
            errors.append(f"{type(e).__name__}: {e}")

    shares = [paths[i::threads] for i in range(threads)]
    ts = [threading.Thread(target=worker, args=(s,), daemon=True) for s in shares]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in ts), "a reader hung for 300 s"
    assert not errors, errors[:5]
    return total[0]


# ---------------------------------------------------------------------------------------------
# the rate


RATE, BURST = 20 * MIB, 4 * MIB
RATE_FILES = 25  # 200 MiB of old objects: about 10 s at 20 MiB/s


def saturated_runs(samples, metric, min_len=1.0):
    """Stretches of stats samples during which fetches were always queued for the limiter, at
    least @min_len seconds long: [(t0, t1, growth of the lagging @metric in between)]."""
    runs, start = [], None
    for i, (t, s) in enumerate(samples + [(None, None)]):
        busy = s is not None and s.v("throttle_queued_fetches", "lagging") > 0
        if busy and start is None:
            start = i
        elif not busy and start is not None:
            t0, s0 = samples[start]
            t1, s1 = samples[i - 1]
            if t1 - t0 >= min_len:
                runs.append((t0, t1, s1.d(s0, metric, "lagging")))
            start = None
    return runs


def check_limited_rate(m, nginx, rels, sha, record_property, *, limit, allowance, unit,
                       threads, tolerance=0.10):
    """Read @rels of mount @m to their ends (@threads readers) and check the rate of lagging
    fetches the server saw against @limit, in bytes/s (@unit "bytes") or fetches/s ("fetches").

    The token bucket lets through at most allowance + limit * T in any window of T seconds
    (allowance: the burst, plus what one charge larger than the bucket may take beyond it), so
    the rate measured at nginx, (amount - allowance) / (last response - first response), must
    be at most limit * (1 + tolerance). It must also be at least limit * (1 - tolerance) when
    the limiter was the bottleneck; when fetches were not queued for it, the readers were
    slower than the limit (a loaded machine), which says nothing about the limiter: reported,
    not failed. Returns the measured rate."""
    want = sum(os.path.getsize(m.path(r)) for r in rels)
    mark = nginx.timed_mark()
    s0 = lu.stats(m.mnt)
    t0 = time.monotonic()
    with lu.Sampler(m.mnt, 0.1) as sampler:
        got = read_files(m, rels, sha, threads=threads)
    wall = time.monotonic() - t0
    s1 = lu.stats(m.mnt)
    assert got == want

    gets = nginx.wait_logged(rels, want, since=mark)
    sent = sum(g.body_bytes for g in gets)
    assert all(g.status == 206 for g in gets), {(g.status, g.range) for g in gets}
    assert sent == want, f"nginx sent {sent} bytes for {want} bytes of objects read once"
    assert s1.d(s0, "cache_fetched_bytes_total", "lagging") == want
    assert s1.d(s0, "cache_fetched_bytes_total", "hot") == 0

    metric = "cache_fetched_bytes_total" if unit == "bytes" else "cache_fetches_total"
    amount = sent if unit == "bytes" else len(gets)
    edge = cache_block_size(m) if unit == "bytes" else 1
    first = min(g.t_end for g in gets)
    last = max(g.t_end for g in gets)
    rate = (amount - allowance) / (last - first)
    ratio = rate / limit
    samples = sampler.samples
    busy_frac = sum(s.v("throttle_queued_fetches", "lagging") > 0
                    for _, s in samples) / len(samples)
    waits = s1.d(s0, "throttle_waits_total", "lagging")
    runs = saturated_runs(samples, metric)
    run_time = sum(t1 - t0 for t0, t1, _ in runs)
    # + one block (or fetch) per run: a run's edges may cut a fetch off either way
    run_rate = sum(n + edge for _, _, n in runs) / run_time if run_time else -1.0
    scale, unit = (MIB, "MiB") if unit == "bytes" else (1, unit)
    report(record_property, unit=unit, limit=limit / scale, rate=rate / scale,
           rate_ratio=ratio, window_s=last - first, wall_s=wall, busy_fraction=busy_frac,
           throttle_waits=waits, throttled_s=s1.d(s0, "throttled_seconds_total", "lagging"),
           saturated_s=run_time, saturated_rate=run_rate / scale)

    assert ratio <= 1 + tolerance, (
        f"the limiter let {rate / scale:.2f} {unit}/s through (allowance subtracted), "
        f"{(ratio - 1) * 100:.1f}% over the limit of {limit / scale:g}")
    if ratio >= 1 - tolerance:
        return rate
    # Too slow: the limiter's fault only if reads were waiting for it.
    if waits > 0 and busy_frac >= 0.9:
        pytest.fail(f"{rate / scale:.2f} {unit}/s ({(1 - ratio) * 100:.1f}% under the limit) "
                    f"while fetches were queued for the limiter {busy_frac:.0%} of the run "
                    f"({waits:.0f} throttle waits)")
    if run_time >= 3.0 and run_rate < (1 - tolerance) * limit:
        pytest.fail(f"{run_rate / scale:.2f} {unit}/s over {run_time:.1f} s during which "
                    "fetches were always queued for the limiter")
    warnings.warn(f"client-bound run: {rate / scale:.2f} {unit}/s with the limiter busy "
                  f"{busy_frac:.0%} of the time; only the upper bound was checked")
    return rate


def cache_block_size(m):
    return int(lu.config(m.mnt)["block_size"])


def test_lagging_rate_holds_at_the_server(mount, store, record_property):
    """lagging_rate=20M, lagging_burst=4M, block_size=1M: reading 200 MiB of old objects (two
    readers) fetches at 20 MiB/s, counted by nginx: (bytes - burst) / (last - first response)
    within 10%. Too high always fails; too low fails only if the limiter was the bottleneck
    (see check_limited_rate)."""
    m = mount(store.nginx.url, BASE + ["lagging_rate=20M", "lagging_burst=4M"])
    rels = store.old[:RATE_FILES]
    assert {lu.xattr(m.path(r), "tier") for r in rels} == {"lagging"}
    cfg = lu.config(m.mnt)
    assert (cfg["lagging_rate"], cfg["lagging_burst"]) == (str(RATE), str(BURST)), cfg
    check_limited_rate(m, store.nginx, rels, store.sha, record_property, limit=RATE,
                       allowance=BURST, unit="bytes", threads=2)


def test_lagging_rate_with_blocks_larger_than_the_burst(mount, store, record_property):
    """block_size=4M over lagging_burst=1M: each 4M charge passes once the bucket is full and
    leaves a debt, so nothing deadlocks and the long-run rate still holds (16M; 64 MiB read,
    about 4 s). Allowance: one block (the burst plus the first charge's excess over it)."""
    m = mount(store.nginx.url, ["block_size=4M", f"hot_ttl={HOT_TTL}", "lagging_rate=16M",
                                "lagging_burst=1M"])
    check_limited_rate(m, store.nginx, store.old[:8], store.sha, record_property,
                       limit=16 * MIB, allowance=4 * MIB, unit="bytes", threads=2)


def test_lagging_rate_charges_short_blocks_their_length(mount, store, record_property):
    """Old objects of 100,000 bytes with block_size=1M: each fetch is charged its length, not
    the block size, so 4M/s lets about 42 of them through per second (150 objects, about 3 s).
    Charged 1M each they would trickle at 4 per second."""
    m = mount(store.nginx.url, BASE + ["lagging_rate=4M", "lagging_burst=1M"])
    check_limited_rate(m, store.nginx, store.small[:150], store.sha, record_property,
                       limit=4 * MIB, allowance=MIB, unit="bytes", threads=8)


def test_lagging_ops_limits_fetches_per_second(mount, store, record_property):
    """lagging_ops=50, lagging_rate=0: 150 one-block old objects are fetched at 50 per second
    after a first burst of 50 (the op bucket holds ops tokens)."""
    m = mount(store.nginx.url, BASE + ["lagging_rate=0", "lagging_ops=50"])
    check_limited_rate(m, store.nginx, store.small[50:200], store.sha, record_property,
                       limit=50, allowance=50, unit="fetches", threads=8)


# ---------------------------------------------------------------------------------------------
# isolation: a replay does not touch the tail's hot working set


def _tail_round(m, rels, data, buf):
    """Read each hot object with O_DIRECT (every byte asked of tierfs, none from the page
    cache); return the objects whose bytes were wrong."""
    return [r for r in rels if lu.read_direct(m.path(r), buf) != data[r]]


@pytest.mark.concurrency
def test_replay_does_not_evict_the_tail(mount, store, record_property):
    """hot_size=64M, block_size=1M. A tail reader re-reads a 32 MiB working set of new objects
    with O_DIRECT while another process replays 256 MiB of old objects (lagging_rate=0, so it
    runs fast, through a 32M lagging tier). During the replay the tail's hot hit ratio stays
    >= 99%, the hot tier fetches nothing (lagging fetches never go into it), rotates no segment
    and never waits for the limiter."""
    nginx = store.nginx
    m = mount(nginx.url, BASE + ["hot_size=64M", "lagging_size=32M", "lagging_rate=0"])
    tail = store.new
    data = {r: (store.root / r).read_bytes() for r in tail}
    buf = lu.aligned_buffer()
    assert {lu.xattr(m.path(r), "tier") for r in tail} == {"hot"}
    assert {lu.xattr(m.path(r), "tier") for r in store.old} == {"lagging"}
    assert not _tail_round(m, tail, data, buf), "wrong bytes on the warm-up round"
    resident = {r: lu.xattr(m.path(r), "cached") for r in tail}
    assert set(resident.values()) == {"hot=0"}, resident

    s0 = lu.stats(m.mnt)
    proc = subprocess.Popen(lu.replay_argv([m.path(r) for r in store.old]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rounds = overlapped = 0
    bad = []
    slowest = 0.0
    deadline = time.monotonic() + 120
    try:
        prev = s0
        while proc.poll() is None or rounds < 3:
            assert time.monotonic() < deadline, "the replay took more than 120 s"
            t = time.monotonic()
            bad += _tail_round(m, tail, data, buf)
            slowest = max(slowest, time.monotonic() - t)
            rounds += 1
            s = lu.stats(m.mnt)
            if s.d(prev, "backend_received_bytes_total") > 0:
                overlapped += 1  # the replay fetched while this round ran
            prev = s
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    s1 = lu.stats(m.mnt)
    assert proc.returncode == 0, f"the replay failed: {err}"
    assert int(out) == N_OLD * OLD_SIZE, f"the replay read {out} bytes"
    assert not bad, f"the tail read wrong bytes from {sorted(set(bad))[:5]}"

    hits = s1.d(s0, "cache_hits_total", "hot")
    misses = s1.d(s0, "cache_misses_total", "hot")
    ratio = hits / (hits + misses) if hits + misses else 0.0
    report(record_property, tail_rounds=rounds, overlapped_rounds=overlapped,
           hot_hit_ratio=ratio, hot_hits=hits, hot_misses=misses,
           hot_fetched=s1.d(s0, "cache_fetched_bytes_total", "hot"),
           lagging_fetched_mib=s1.d(s0, "cache_fetched_bytes_total", "lagging") / MIB,
           lagging_evictions=s1.d(s0, "cache_evictions_total", "lagging"),
           slowest_round_s=slowest)

    assert overlapped >= 2, (
        f"only {overlapped} of {rounds} tail rounds ran while the replay fetched: the test "
        "did not exercise what it claims")
    assert s1.d(s0, "reads_total") >= rounds * len(tail), "the tail's reads did not reach tierfs"
    assert ratio >= 0.99, (
        f"tail hot hit ratio {ratio:.4f} during the replay (hits {hits}, misses {misses})")
    assert s1.d(s0, "cache_fetched_bytes_total", "hot") == 0, (
        "the hot tier fetched during the replay")
    assert s1.d(s0, "cache_evictions_total", "hot") == 0, "the hot tier rotated during the replay"
    assert s1.d(s0, "throttle_waits_total", "hot") == 0, "hot reads waited for the limiter"
    assert s1.d(s0, "throttled_seconds_total", "hot") == 0
    assert s1.v("cache_resident_blocks", "hot") == len(tail)
    assert s1.d(s0, "cache_fetched_bytes_total", "lagging") >= N_OLD * OLD_SIZE, (
        "the replay did not go through the lagging tier")
    assert s1.d(s0, "cache_evictions_total", "lagging") > 0, (
        "the replay did not fill the lagging tier")
    resident = {r: lu.xattr(m.path(r), "cached") for r in tail}
    assert set(resident.values()) == {"hot=0"}, resident


@pytest.mark.concurrency
def test_throttled_replay_does_not_stall_the_tail(mount, store, record_property):
    """A replay of 24 old objects at once (more readers than tierfs has FUSE worker threads)
    through lagging_rate=1M queues its fetches behind the limiter. A tail reader's cold reads
    of 32 MiB of new objects must still run at hot speed: no FUSE thread waits on the limiter
    and hot fetches never queue behind lagging ones. At 1 MiB/s a tail caught in the lagging
    queue would need 30 s or more; the bound here is 10 s. Then lagging_rate=0, set live,
    releases the queue and the replay finishes at once."""
    nginx = store.nginx
    m = mount(nginx.url, BASE + ["lagging_rate=1M", "lagging_burst=1M"])
    replay = store.old[:24]
    proc = subprocess.Popen(lu.replay_argv([m.path(r) for r in replay], parallel=True),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        harness.wait_until(
            lambda: lu.stats(m.mnt).v("throttle_queued_fetches", "lagging") >= 16, 30,
            "16 lagging fetches queued behind the limiter")
        s0 = lu.stats(m.mnt)
        t = time.monotonic()
        got = read_files(m, store.new, store.sha, threads=1)
        took = time.monotonic() - t
        s1 = lu.stats(m.mnt)
        still_running = proc.poll() is None
    finally:
        # Unthrottle, so the replay's parked reads are answered and it ends by itself (a
        # killed reader would stay in the kernel until its queued reads are answered).
        harness.live_set(m.mnt, "lagging_rate", b"0")
        t_free = time.monotonic()
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate(timeout=120)
            pytest.fail("the replay did not finish within 60 s of lagging_rate=0")
        finish = time.monotonic() - t_free
    report(record_property, tail_cold_read_s=took,
           lagging_queued=s0.v("throttle_queued_fetches", "lagging"),
           hot_fetched_mib=s1.d(s0, "cache_fetched_bytes_total", "hot") / MIB,
           replay_finish_after_unthrottle_s=finish)
    assert still_running, "the replay ended before the tail finished: nothing was tested"
    assert got == N_NEW * NEW_SIZE
    assert s1.d(s0, "cache_fetched_bytes_total", "hot") == N_NEW * NEW_SIZE
    assert s1.d(s0, "throttle_waits_total", "hot") == 0
    assert s1.v("throttle_queued_fetches", "lagging") > 0, "the limiter's queue drained"
    assert took < 10, f"32 MiB of cold hot-tier reads took {took:.1f} s behind a throttled replay"
    assert proc.returncode == 0, err
    assert int(out) == len(replay) * OLD_SIZE


@pytest.mark.concurrency
def test_slow_lagging_fetches_leave_connections_for_the_tail(mount, store, tmp_path,
                                                            record_property):
    """A server that sends old objects slowly (nginx limit_rate 200k: a 1 MiB block takes
    about 4 s) and a replay of 12 of them at once (lagging_rate=0, readahead=0) fills every
    connection lagging fetches may use (max_conns=8, a quarter kept for hot reads). The tail's
    cold reads of 32 new objects must still go at once on the reserved connections: under
    3 s, where waiting for a lagging connection would take about 4 s per wave."""
    srv = lu.TimedNginx(store.root, tmp_path / "slow-nginx", slow_prefix="old",
                        slow_rate="200k")
    servers = _conftest_servers()
    if servers is not None:
        servers.append(srv)
    srv.start()
    readers, errors = [], []
    try:
        m = mount(srv.url, BASE + ["max_conns=8", "readahead=0", "lagging_rate=0",
                                   "timeout=20", "retries=0"])

        def one_block(rel):
            try:
                fd = os.open(m.path(rel), os.O_RDONLY)
                try:
                    os.pread(fd, MIB, 0)
                finally:
                    os.close(fd)
            except OSError as e:
                errors.append(e)  # EIO once the server is stopped below: expected

        for rel in store.old[:12]:
            t = threading.Thread(target=one_block, args=(rel,), daemon=True)
            t.start()
            readers.append(t)
        harness.wait_until(lambda: lu.stats(m.mnt).v("backend_active_requests") >= 6, 20,
                           "6 slow lagging fetches on the wire")
        s0 = lu.stats(m.mnt)
        t = time.monotonic()
        got = read_files(m, store.new, store.sha)
        took = time.monotonic() - t
        s1 = lu.stats(m.mnt)
        busy = s1.v("cache_inflight_fetches", "lagging")
    finally:
        srv.stop()  # the slow fetches fail; their readers get an error and return
        for r in readers:
            r.join(timeout=60)
    assert not any(r.is_alive() for r in readers), "a replay reader still hangs"
    report(record_property, tail_cold_read_s=took,
           lagging_inflight_before=s0.v("cache_inflight_fetches", "lagging"),
           lagging_inflight_after=busy)
    assert got == N_NEW * NEW_SIZE
    assert s1.d(s0, "cache_fetched_bytes_total", "hot") == N_NEW * NEW_SIZE
    assert busy >= 6, "the slow lagging fetches were over before the tail finished"
    assert took < 3, (f"32 cold 1 MiB hot reads took {took:.1f} s while lagging fetches "
                      "held the connections")


def test_killed_reader_is_released_while_throttled(mount, store, record_property):
    """A replay process killed (SIGKILL) while its read waits for the limiter must go away
    promptly: the kernel sends FUSE_INTERRUPT for the read, and tierfs should answer it (EINTR)
    and drop the wait. lagging_rate=128K, burst 1M, block 1M, readahead=0: the first block
    passes, the second waits 8 s for tokens. The process must be gone within 3 s of the kill
    (until then it is an unkillable zombie holding the mount busy)."""
    m = mount(store.nginx.url, BASE + ["lagging_rate=128K", "lagging_burst=1M",
                                       "readahead=0"])
    proc = subprocess.Popen(lu.replay_argv([m.path(store.old[0])]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    gone_after = None
    try:
        harness.wait_until(
            lambda: (lambda s: s.v("read_bytes_total") >= MIB
                     and s.v("throttle_queued_fetches", "lagging") >= 1)(lu.stats(m.mnt)),
            20, "the reader's second block to wait for the limiter")
        t = time.monotonic()
        proc.kill()
        try:
            proc.wait(timeout=3)
            gone_after = time.monotonic() - t
        except subprocess.TimeoutExpired:
            pass
    finally:
        harness.live_set(m.mnt, "lagging_rate", b"0")  # release it anyway
        proc.kill()
        proc.wait(timeout=60)
    report(record_property, killed_reader_gone_after_s=gone_after if gone_after else -1.0)
    assert gone_after is not None, (
        "a reader killed while its read was throttled was still there 3 s later: tierfs "
        "does not answer FUSE_INTERRUPT for reads parked behind the limiter")


STOPPED_READER = r"""
import os, signal, sys
signal.signal(signal.SIGUSR1, lambda *a: None)   # a handler that returns (SA_RESTART)
fd = os.open(sys.argv[1], os.O_RDONLY)
data = b""
while True:
    b = os.read(fd, 1 << 20)
    if not b:
        break
    data += b
sys.stdout.write(str(len(data)))
"""


def test_signals_do_not_interrupt_a_waiting_read(mount, store):
    """Signals that do not kill (SIGSTOP/SIGCONT, a SIGUSR1 whose handler returns) reach a
    reader whose read waits for the limiter: the kernel interrupts the request, but tierfs
    lets the read go on, so the reader gets every byte and no EINTR. Only a dying reader's
    read is cancelled (test_killed_reader_is_released_while_throttled)."""
    m = mount(store.nginx.url, BASE + ["lagging_rate=1M", "lagging_burst=1M", "readahead=0"])
    rel = store.old[0]
    want = os.path.getsize(store.nginx.root / rel)
    proc = subprocess.Popen([sys.executable, "-c", STOPPED_READER, m.path(rel)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        harness.wait_until(
            lambda: lu.stats(m.mnt).v("throttle_queued_fetches", "lagging") >= 1, 20,
            "the reader's read to wait for the limiter")
        for sig in (signal.SIGSTOP, signal.SIGCONT, signal.SIGUSR1, signal.SIGUSR1):
            proc.send_signal(sig)
        harness.live_set(m.mnt, "lagging_rate", b"0")  # let it finish fast
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"the signalled reader failed: {err.decode()[-500:]}"
    assert int(out) == want


# ---------------------------------------------------------------------------------------------
# live changes


def _window_rate(m, seconds):
    """Lagging bytes fetched per second over a window of @seconds (time.monotonic())."""
    s0, t0 = lu.stats(m.mnt), time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:  # a measurement window, not a wait for a condition
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))
    s1, t1 = lu.stats(m.mnt), time.monotonic()
    return s1.d(s0, "cache_fetched_bytes_total", "lagging") / (t1 - t0), s0, s1


def test_live_lagging_rate_raises_fetch_rate(mount, store, record_property):
    """lagging_rate=10M (burst 1M) while two readers replay old objects; setfattr
    user.tierfs.lagging_rate=40M mid-run. The fetch rate over a window after the change is at
    least twice the rate over a window before it (4x expected), and each stays under its limit;
    back to 10M, the rate drops under 10M again. Windows start once the limiter throttles, so
    the initial burst is not counted."""
    nginx = store.nginx
    m = mount(nginx.url, BASE + ["lagging_rate=10M", "lagging_burst=1M"])
    stop = threading.Event()
    errors = []

    def reader(rels):
        try:
            for r in rels:
                fd = os.open(m.path(r), os.O_RDONLY)
                try:
                    while not stop.is_set() and os.read(fd, MIB):
                        pass
                finally:
                    os.close(fd)
                if stop.is_set():
                    return
        except BaseException as e:
            errors.append(e)

    ts = [threading.Thread(target=reader, args=(store.old[i::2],), daemon=True)
          for i in range(2)]
    for t in ts:
        t.start()
    try:
        harness.wait_until(lambda: lu.stats(m.mnt).v("throttle_waits_total", "lagging") > 0,
                           20, "the limiter to throttle the replay")
        before, _, s_b = _window_rate(m, 2.5)
        harness.live_set(m.mnt, "lagging_rate", b"40M")
        assert lu.xattr(m.mnt, "lagging_rate") == "40M"
        assert lu.stats(m.mnt).v("limiter_rate_bytes", "lagging") == 40 * MIB
        after, _, s_a = _window_rate(m, 2.5)
        harness.live_set(m.mnt, "lagging_rate", b"10M")
        lowered, _, _ = _window_rate(m, 2.5)
        replay_alive = all(t.is_alive() for t in ts)
    finally:
        stop.set()
        harness.live_set(m.mnt, "lagging_rate", b"0")  # let parked reads finish
        for t in ts:
            t.join(timeout=60)
    assert not errors, errors
    report(record_property, before_mib_s=before / MIB, after_mib_s=after / MIB,
           lowered_mib_s=lowered / MIB, speedup=after / before if before else float("inf"))
    assert replay_alive, "the replay ran out of objects during the windows: nothing measured"
    assert before > 0, "nothing fetched before the change"
    # each window may hold one burst (1M) and a block cut at its edge (1M) beyond the rate
    assert before <= 10 * MIB * 1.1 + 2 * MIB / 2.5, f"{before / MIB:.1f} MiB/s at lagging_rate=10M"
    assert after <= 40 * MIB * 1.1 + 2 * MIB / 2.5, f"{after / MIB:.1f} MiB/s at lagging_rate=40M"
    assert after >= 2 * before, (
        f"raising lagging_rate 10M -> 40M took the fetch rate from {before / MIB:.1f} "
        f"to {after / MIB:.1f} MiB/s")
    assert lowered <= 10 * MIB * 1.1 + 2 * MIB / 2.5, (
        f"{lowered / MIB:.1f} MiB/s after lowering lagging_rate back to 10M")


BAD_VALUES = [b"fast", b"-1", b"99999999999T", b"", b"10X", b"1.5M", b"0x10", b" 5M"]


@pytest.mark.parametrize("name", ["lagging_rate", "lagging_burst", "lagging_ops", "hot_ttl"])
def test_live_setting_refuses_bad_values(mount, store, name):
    """A bad value for a live setting is refused with EINVAL and changes nothing: the getxattr
    value, the config file and the limiter stay as they were."""
    m = mount(store.nginx.url, BASE + ["lagging_rate=20M", "lagging_burst=4M", "lagging_ops=7"])
    before = lu.xattr(m.mnt, name)
    cfg = lu.config(m.mnt)
    rate = lu.stats(m.mnt).v("limiter_rate_bytes", "lagging")
    bad = []
    for v in BAD_VALUES + ([b"0"] if name == "hot_ttl" else []):
        try:
            harness.live_set(m.mnt, name, v)
            bad.append((v, "accepted"))
        except OSError as e:
            if e.errno != errno.EINVAL:
                bad.append((v, errno.errorcode.get(e.errno, e.errno)))
        now = lu.xattr(m.mnt, name)
        if now != before:
            bad.append((v, f"value changed {before} -> {now}"))
    assert not bad, f"{name}: want EINVAL and no change, got {bad}"
    assert lu.config(m.mnt) == cfg
    assert lu.stats(m.mnt).v("limiter_rate_bytes", "lagging") == rate


def test_live_settings_take_effect(mount, store):
    """Good values are parsed like mount options and show everywhere: getxattr (a size in the
    largest unit that divides it, as it was most likely typed), the config file (bytes), the
    limiter gauge."""
    m = mount(store.nginx.url, BASE + ["lagging_rate=20M", "lagging_burst=4M"])
    for name, value, shown, want in [("lagging_rate", b"100M", "100M", 100 * MIB),
                                     ("lagging_rate", b"1g", "1G", 1 << 30),
                                     ("lagging_rate", b"1048576", "1M", MIB),
                                     ("lagging_rate", b"100000", "100000", 100000),
                                     ("lagging_burst", b"8M", "8M", 8 * MIB),
                                     ("lagging_ops", b"50", "50", 50),
                                     ("hot_ttl", b"3600s", "3600", 3600),
                                     # as echo would send it
                                     ("lagging_rate", b"7M\n", "7M", 7 * MIB),
                                     ("lagging_rate", b"0", "0", 0)]:
        harness.live_set(m.mnt, name, value)
        assert lu.xattr(m.mnt, name) == shown, (name, value)
        assert lu.config(m.mnt)[name] == str(want), (name, value)
    assert lu.stats(m.mnt).v("limiter_rate_bytes", "lagging") == 0
    # answered by name, never listed (cp -a would copy them): test_security_control.py
    assert not [n for n in os.listxattr(m.mnt) if n.startswith("user.tierfs.")]


def test_live_hot_ttl_moves_objects_between_tiers(mount, store):
    """ttl/a.bin and ttl/b.bin are 600 s old: hot under hot_ttl=3 days, lagging under
    hot_ttl=60 (set live), hot again under 3600. Blocks already in the hot tier are still
    served from it (a hot hit is served whatever the age); new misses go to the lagging tier."""
    m = mount(store.nginx.url, BASE + ["lagging_rate=0", "lagging_ttl=600"])
    a, b = m.path("ttl/a.bin"), m.path("ttl/b.bin")
    assert (lu.xattr(a, "tier"), lu.xattr(b, "tier")) == ("hot", "hot")
    assert lu.sha256_read(a) == store.sha["ttl/a.bin"]
    assert lu.xattr(a, "cached") == "hot=0-1"

    harness.live_set(m.mnt, "hot_ttl", b"60")
    assert lu.xattr(m.mnt, "hot_ttl") == "60"
    assert lu.config(m.mnt)["hot_ttl"] == "60"
    assert (lu.xattr(a, "tier"), lu.xattr(b, "tier")) == ("lagging", "lagging")
    assert lu.xattr(m.path(store.new[0]), "tier") == "hot"
    assert lu.xattr(m.path(store.old[0]), "tier") == "lagging"

    s0 = lu.stats(m.mnt)
    assert lu.sha256_read(a) == store.sha["ttl/a.bin"]  # lagging now: to tierfs
    s1 = lu.stats(m.mnt)
    assert s1.d(s0, "cache_hits_total", "hot") >= 2, "a.bin's hot blocks were not served"
    assert s1.d(s0, "backend_received_bytes_total") == 0, "a.bin's hot blocks were fetched again"
    assert lu.sha256_read(b) == store.sha["ttl/b.bin"]
    s2 = lu.stats(m.mnt)
    assert s2.d(s1, "cache_fetched_bytes_total", "lagging") == 2 * MIB
    assert s2.d(s1, "cache_fetched_bytes_total", "hot") == 0
    assert (lu.xattr(a, "cached"), lu.xattr(b, "cached")) == ("hot=0-1", "lagging=0-1")

    harness.live_set(m.mnt, "hot_ttl", b"3600")
    assert lu.xattr(m.mnt, "hot_ttl") == "3600"
    assert (lu.xattr(a, "tier"), lu.xattr(b, "tier")) == ("hot", "hot")
    assert lu.xattr(m.path(store.old[0]), "tier") == "lagging"


def test_lagging_off_reads_everything_hot_and_unthrottled(mount, store):
    """lagging=off: old objects go through the hot tier, and lagging_rate does not apply
    (16 MiB at lagging_rate=1M would take 15 s)."""
    m = mount(store.nginx.url, BASE + ["lagging=off", "lagging_rate=1M", "lagging_burst=1M"])
    rels = store.old[:2]
    assert {lu.xattr(m.path(r), "tier") for r in rels} == {"hot"}
    assert lu.config(m.mnt)["lagging"] == "off"
    s0 = lu.stats(m.mnt)
    t = time.monotonic()
    read_files(m, rels, store.sha)
    took = time.monotonic() - t
    s1 = lu.stats(m.mnt)
    assert s1.d(s0, "cache_fetched_bytes_total", "hot") == 2 * OLD_SIZE
    assert s1.d(s0, "cache_fetched_bytes_total", "lagging") == 0
    assert s1.d(s0, "throttle_waits_total", "lagging") == 0
    assert s1.v("limiter_rate_bytes", "lagging") == 0
    assert took < 8, f"16 MiB took {took:.1f} s with lagging=off"
    assert {lu.xattr(m.path(r), "cached") for r in rels} == {"hot=0-7"}


def test_random_reads_of_a_hot_object_larger_than_the_tier_fetch_parts(mount, store):
    """A hot object larger than the hot tier (lagging=off puts the 8 MiB old segments there,
    hot_size=4M): a random 4 KiB read fetches the 64 KiB around it, one range GET, and a read
    inside that part is served without a fetch. An object that fits (1 MiB) keeps whole
    blocks. Every byte is compared with the store's."""
    nginx = store.nginx
    m = mount(nginx.url, ["block_size=512K", "hot_size=4M", f"hot_ttl={HOT_TTL}",
                          "lagging=off"])
    big, small = store.old[0], store.new[0]
    src_big, src_small = (store.root / big).read_bytes(), (store.root / small).read_bytes()
    off = 3 * MIB + 5 * 65536 + 4096
    mark = nginx.timed_mark()
    s0 = lu.stats(m.mnt)
    assert lu.pread_direct(m.path(big), off, 4096) == src_big[off:off + 4096]
    assert lu.pread_direct(m.path(big), off + 8192, 4096) == src_big[off + 8192:off + 12288]
    s1 = lu.stats(m.mnt)
    gets = nginx.wait_logged([big], 65536, since=mark)
    assert [g.range for g in gets] == [f"bytes={3 * MIB + 5 * 65536}-{3 * MIB + 6 * 65536 - 1}"]
    assert s1.d(s0, "cache_part_fetches_total", "hot") == 1
    assert s1.d(s0, "cache_fetched_bytes_total", "hot") == 65536

    off = 512 * 1024 + 8192
    mark = nginx.timed_mark()
    assert lu.pread_direct(m.path(small), off, 4096) == src_small[off:off + 4096]
    s2 = lu.stats(m.mnt)
    gets = nginx.wait_logged([small], 512 * 1024, since=mark)
    assert [g.range for g in gets] == [f"bytes={512 * 1024}-{MIB - 1}"]
    assert s2.d(s1, "cache_part_fetches_total", "hot") == 0
    assert s2.d(s1, "cache_fetched_bytes_total", "hot") == 512 * 1024


@pytest.mark.parametrize("disk", ["opens", "fails"])
def test_a_disk_tier_lets_hot_objects_keep_whole_blocks(mount, store, tmp_path, disk):
    """With a disk tier, a hot object up to hot_size + disk_size keeps whole blocks (they
    are read again from disk): the 8 MiB segment through hot_size=4M, disk_size=8M takes its
    whole block. A cache_dir that cannot be opened (its parent missing) mounts without a disk
    tier, and then the same read takes a part."""
    nginx = store.nginx
    cdir = tmp_path / ("cache" if disk == "opens" else "no/such/parent/cache")
    m = mount(nginx.url, ["block_size=512K", "hot_size=4M", f"hot_ttl={HOT_TTL}",
                          "lagging=off", f"cache_dir={cdir}", "disk_size=8M"])
    big = store.old[1]
    src = (store.root / big).read_bytes()
    off = 5 * MIB + 3 * 65536 + 4096
    mark = nginx.timed_mark()
    s0 = lu.stats(m.mnt)
    assert lu.pread_direct(m.path(big), off, 4096) == src[off:off + 4096]
    s1 = lu.stats(m.mnt)
    if disk == "opens":
        gets = nginx.wait_logged([big], 512 * 1024, since=mark)
        assert [g.range for g in gets] == [f"bytes={5 * MIB}-{5 * MIB + 512 * 1024 - 1}"]
        assert s1.d(s0, "cache_part_fetches_total", "hot") == 0
    else:
        gets = nginx.wait_logged([big], 65536, since=mark)
        assert [g.range for g in gets] == [f"bytes={5 * MIB + 3 * 65536}-{5 * MIB + 4 * 65536 - 1}"]
        assert s1.d(s0, "cache_part_fetches_total", "hot") == 1


# ---------------------------------------------------------------------------------------------
# the stats agree with the server; xattrs; the control directory


def _blocks(size, bs=MIB):
    return [(k * bs, min((k + 1) * bs, size) - 1) for k in range((size + bs - 1) // bs)]


def _ranges(gets, size):
    out = []
    for g in gets:
        first, _, last = g.range.removeprefix("bytes=").partition("-")
        out.append((int(first), min(int(last) if last else size - 1, size - 1)))
    return sorted(out)


def test_stats_agree_with_the_server(mount, store, record_property):
    """Read three new and three old objects once. Per tier, tierfs_cache_fetched_bytes_total
    equals the bytes nginx sent for those objects and the sizes read: each block fetched once,
    an old object's by one range GET per block (the lagging limiter counts requests), a new
    object's by range GETs of whole blocks that tile it (blocks read together go as one
    request). The backend's received bytes agree too. user.tierfs.tier, .cached and .etag say
    where each object is and what version."""
    nginx = store.nginx
    m = mount(nginx.url, BASE + ["lagging_ttl=600", "lagging_rate=100M"])
    new, old = sorted(MIXED_NEW), sorted(MIXED_OLD)
    mark = nginx.timed_mark()
    s0 = lu.stats(m.mnt)
    read = read_files(m, new + old, store.sha)
    gets_new = nginx.wait_logged(new, sum(MIXED_NEW.values()), since=mark)
    gets_old = nginx.range_gets(old, since=mark)
    s1 = lu.stats(m.mnt)

    sent_new = sum(g.body_bytes for g in gets_new)
    sent_old = sum(g.body_bytes for g in gets_old)
    report(record_property, sent_hot=sent_new, sent_lagging=sent_old,
           fetched_hot=s1.d(s0, "cache_fetched_bytes_total", "hot"),
           fetched_lagging=s1.d(s0, "cache_fetched_bytes_total", "lagging"))
    assert read == sum(MIXED_NEW.values()) + sum(MIXED_OLD.values())
    bad = {}
    for rel, size in {**MIXED_NEW, **MIXED_OLD}.items():
        got = _ranges([g for g in gets_new + gets_old if g.path == rel], size)
        if rel in MIXED_OLD:
            ok = got == _blocks(size)
        else:  # whole blocks, in order, no gap, no overlap
            ok = (all(a % MIB == 0 and (b + 1) % MIB == 0 or b == size - 1 for a, b in got)
                  and [a for a, _ in got] == [0] + [b + 1 for _, b in got[:-1]]
                  and got[-1][1] == size - 1)
        if not ok:
            bad[rel] = got
    assert not bad, f"want each block fetched once (old: one GET each); ranges sent: {bad}"
    assert all(g.status == 206 for g in gets_new + gets_old)
    assert sent_new == sum(MIXED_NEW.values())
    assert sent_old == sum(MIXED_OLD.values())
    assert s1.d(s0, "cache_fetched_bytes_total", "hot") == sent_new
    assert s1.d(s0, "cache_fetched_bytes_total", "lagging") == sent_old
    assert s1.d(s0, "backend_received_bytes_total") == sent_new + sent_old
    nblocks = {t: sum(len(_blocks(n)) for n in objs.values())
               for t, objs in (("hot", MIXED_NEW), ("lagging", MIXED_OLD))}
    for tier in ("hot", "lagging"):
        assert s1.d(s0, "cache_fetches_total", tier) == nblocks[tier], tier
        assert s1.d(s0, "cache_fetch_errors_total", tier) == 0, tier
    assert s1.d(s0, "read_bytes_total") == read

    want_cached = {
        "mixed/new-1m.bin": "hot=0", "mixed/new-2.5m.bin": "hot=0-2",
        "mixed/new-3m17.bin": "hot=0-3", "mixed/old-2m5.bin": "lagging=0-2",
        "mixed/old-1m-1.bin": "lagging=0", "mixed/old-5m.bin": "lagging=0-4",
    }
    got = {r: (lu.xattr(m.path(r), "tier"), lu.xattr(m.path(r), "cached")) for r in want_cached}
    want = {r: ("hot" if r in MIXED_NEW else "lagging", c) for r, c in want_cached.items()}
    assert got == want
    assert lu.xattr(m.path(store.new[5]), "cached") == "none"
    for r in ["mixed/new-3m17.bin", "mixed/old-5m.bin"]:
        assert lu.xattr(m.path(r), "etag") == nginx.etag(r)
    names = set(os.listxattr(m.path("mixed/old-5m.bin")))
    assert not [n for n in names if n.startswith("user.tierfs.")], names


def test_config_shows_effective_settings(mount, store):
    m = mount(store.nginx.url, BASE + [
        "hot_size=64M", "lagging_size=16M", "lagging_ttl=9", "lagging_rate=30M",
        "lagging_ops=40", "readahead=3", "lagging_rate=33M"])  # the last one wins
    cfg = lu.config(m.mnt)
    want = {"block_size": str(MIB), "hot_size": str(64 * MIB), "hot_ttl": str(HOT_TTL),
            "lagging": "on", "lagging_size": str(16 * MIB), "lagging_ttl": "9",
            "lagging_rate": str(33 * MIB), "lagging_ops": "40", "readahead": "3",
            "control_dir": ".tierfs"}
    assert {k: cfg.get(k) for k in want} == want, cfg
    # the default burst is twice the rate
    assert lu.xattr(m.mnt, "lagging_burst") == "66M"
    s = lu.stats(m.mnt)
    assert s.v("cache_size_bytes", "hot") == 64 * MIB
    assert s.v("cache_size_bytes", "lagging") == 16 * MIB
    assert s.v("limiter_rate_bytes", "lagging") == 33 * MIB


def test_control_dir_hidden_but_reachable(mount, store):
    m = mount(store.nginx.url, BASE)
    assert ".tierfs" not in os.listdir(m.mnt)
    assert sorted(os.listdir(m.mnt)) == sorted({r.split("/")[0] for r in store.sizes})
    st = os.stat(m.path(".tierfs"))
    assert stat.S_ISDIR(st.st_mode)
    assert sorted(os.listdir(m.path(".tierfs"))) == ["config", "stats"]
    st = os.stat(m.path(".tierfs/stats"))
    assert stat.S_ISREG(st.st_mode)
    assert lu.stats(m.mnt).v("cache_hits_total", "hot") >= 0
    harness.expect_errno(lambda: os.stat(m.path(".tierfs/nope")), errno.ENOENT)
    harness.expect_errno(lambda: os.stat(m.path("old/.tierfs")), errno.ENOENT)


def test_control_dir_renamed(mount, store):
    m = mount(store.nginx.url, BASE + ["control_dir=ctl"])
    harness.expect_errno(lambda: os.stat(m.path(".tierfs")), errno.ENOENT)
    assert "ctl" not in os.listdir(m.mnt)
    assert stat.S_ISREG(os.stat(m.path("ctl/stats")).st_mode)
    assert lu.stats(m.mnt, "ctl").v("reads_total") >= 0
    assert lu.config(m.mnt, "ctl")["control_dir"] == "ctl"


def test_real_object_named_like_control_dir_wins(mount, tmp_path):
    """A store holding an object named .tierfs (and one holding a directory .tierfs/ with a
    'stats' object): the mount shows the real objects; control_dir= moves the control
    directory out of their way."""
    a = tmp_path / "store-a"
    b = tmp_path / "store-b"
    corpus.build_one(a, ".tierfs", 1000, seed=5)
    corpus.build_one(a, "x.bin", 10, seed=5)
    corpus.build_one(b, ".tierfs/stats", 777, seed=5)
    ma = mount("file://" + str(a), BASE)
    assert stat.S_ISREG(os.stat(ma.path(".tierfs")).st_mode)
    assert Path(ma.path(".tierfs")).read_bytes() == (a / ".tierfs").read_bytes()
    assert ".tierfs" in os.listdir(ma.mnt)
    mb = mount("file://" + str(b), BASE + ["control_dir=_ctl"])
    assert Path(mb.path(".tierfs/stats")).read_bytes() == (b / ".tierfs/stats").read_bytes()
    assert os.listdir(mb.path(".tierfs")) == ["stats"]
    assert lu.config(mb.mnt, "_ctl")["control_dir"] == "_ctl"


# ---------------------------------------------------------------------------------------------
# the page cache


def test_lagging_files_bypass_the_page_cache(mount, store):
    """An old object read twice reaches tierfs both times (its pages are dropped behind the
    reader and at close, and a lagging open starts without them): reads_total grows on
    the second read too, served from the lagging tier without a fetch while its blocks are
    valid. A new object read twice is served by the page cache the second time: reads_total
    does not grow, nothing is fetched."""
    nginx = store.nginx
    m = mount(nginx.url, BASE + ["lagging_ttl=600", "lagging_rate=0"])
    old, new = store.old[0], "mixed/new-3m17.bin"
    counts = []
    for rel in (old, old, new, new):
        mark = nginx.timed_mark()
        s0 = lu.stats(m.mnt)
        assert lu.sha256_read(m.path(rel)) == store.sha[rel]
        s1 = lu.stats(m.mnt)
        nginx.wait_idle()
        counts.append((s1.d(s0, "reads_total"), s1.d(s0, "read_bytes_total"),
                       sum(g.body_bytes for g in nginx.range_gets([rel], since=mark))))
    (r1, b1, f1), (r2, b2, f2), (r3, b3, f3), (r4, b4, f4) = counts
    assert (b1, f1) == (OLD_SIZE, OLD_SIZE), counts
    assert r2 >= OLD_SIZE // MIB and b2 == OLD_SIZE, (
        f"the second read of a lagging file did not reach tierfs: {counts}")
    assert f2 == 0, f"the lagging blocks were fetched again within lagging_ttl: {counts}"
    assert b3 == f3 == MIXED_NEW[new] and r3 > 0, counts
    assert (r4, b4, f4) == (0, 0, 0), (
        f"re-reading a hot file with a warm page cache reached tierfs: {counts}")


def test_lagging_page_cache_option(mount, store):
    """lagging_page_cache: old objects keep the page cache too; a re-read stays in the
    kernel."""
    m = mount(store.nginx.url, BASE + ["lagging_page_cache", "lagging_ttl=600"])
    rel = store.old[1]
    assert lu.sha256_read(m.path(rel)) == store.sha[rel]
    s0 = lu.stats(m.mnt)
    assert lu.sha256_read(m.path(rel)) == store.sha[rel]
    assert lu.stats(m.mnt).d(s0, "reads_total") == 0


def test_lagging_blocks_expire_after_lagging_ttl(mount, store):
    """lagging_ttl=2: once an old object's blocks have expired (user.tierfs.cached says
    "none"), reading it again fetches every block again."""
    nginx = store.nginx
    m = mount(nginx.url, BASE + ["lagging_ttl=2", "lagging_rate=0"])
    rel = store.old[2]
    mark = nginx.timed_mark()
    assert lu.sha256_read(m.path(rel)) == store.sha[rel]
    harness.wait_until(lambda: lu.xattr(m.path(rel), "cached") == "none", 15,
                       "the lagging blocks to expire")
    assert lu.sha256_read(m.path(rel)) == store.sha[rel]
    gets = nginx.wait_logged([rel], 2 * OLD_SIZE, since=mark)
    assert _ranges(gets, OLD_SIZE) == sorted(_blocks(OLD_SIZE) * 2)
