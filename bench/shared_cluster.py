#!/usr/bin/python3
"""The shared scenario (bench.py's 12) on a Redis Cluster: 3 masters and 3 replicas of
redis-server on 127.0.0.1 (tests/integration/test_cluster.py's Cluster), a loopback nginx,
three mounts with shared=redis://ONE-NODE.

1. share: the 3 mounts read the same new objects at once, each from its own share of them, at
   full speed: bytes at the store per byte of the objects (1.00x: each block fetched once).
2. failover: the cluster emptied, 3 new mounts read them again, paced (--pace, MiB/s a reader),
   and the master holding most blocks is killed (SIGKILL) a third of the way in: the blocks
   fetched from the store beyond one each, against the blocks whose master was down (each of
   the 3 mounts may miss each of those once); how long until the replica was promoted, and
   the worst 1 MiB read.

    TIERFS_BIN=$PWD/build/tierfs /usr/bin/python3 bench/shared_cluster.py [--pace 24]
        [--full-coverage]   (cluster-require-full-coverage yes: every key refused meanwhile)
        [--json FILE] [--plain] [--timeout MS] [--keep]  (--plain: the share row on one plain redis-server first)

As root (it mounts). Prints one line per figure, and a JSON object at the end.
"""

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))

import corpus  # noqa: E402
import harness  # noqa: E402
import lagging_util as lu  # noqa: E402
from test_cluster import Cluster, slot  # noqa: E402
from test_shared import Redis  # noqa: E402

MIB = 1 << 20
N, SIZE, BS = 16, 16 * MIB, 4 * MIB
PREFIX = "t:"  # test_cluster.Cluster.block_keys looks under it


def reader(m, rels, pace, lat, errors):
    """Read @rels through @m, 1 MiB at a time, at @pace MiB/s (0: full speed)."""
    t0, n = time.monotonic(), 0
    try:
        for rel in rels:
            with open(m.mnt / rel, "rb", buffering=0) as f:
                while True:
                    t = time.monotonic()
                    if not f.read(MIB):
                        break
                    lat.append(time.monotonic() - t)
                    n += 1
                    if pace:
                        time.sleep(max(0.0, t0 + n / pace - time.monotonic()))
    except BaseException as e:  # noqa: BLE001
        errors.append(f"{m.mnt}: {e!r}")


def run(ng, work, url, rels, label, pace, during=None):
    """3 mounts read @rels, each from its own third on; @during(t0) runs beside them.
    @return (store blocks fetched, worst read s, the mounts' stats)."""
    o = [f"block_size={BS // MIB}M", "hot_ttl=100000000", "readahead=2", f"shared={url}",
         f"shared_prefix={PREFIX}", f"shared_timeout={TIMEOUT_MS}"]
    ms = [harness.Mount(ng.url, work / f"mnt-{label}-{i}", o, logdir=work).start()
          for i in range(3)]
    try:
        ng.wait_idle()
        mark = ng.timed_mark()
        lat, errors = [], []
        ts = [threading.Thread(target=reader, args=(m, rels[i * N // 3:] + rels[:i * N // 3],
                                                    pace, lat, errors))
              for i, m in enumerate(ms)]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        extra = during(t0) if during else None
        for t in ts:
            t.join()
        assert not errors, errors
        ng.wait_idle()
        got = sum(r.body_bytes for r in ng.timed_requests(mark) if r.range)
        for m in ms:
            for rel in rels:
                assert lu.sha256_read(m.path(rel)) == SHA[rel], f"{rel}: wrong bytes"
        sts = [lu.stats(m.mnt) for m in ms]
        return got / BS, max(lat), sts, extra, time.monotonic() - t0
    finally:
        for m in ms:
            m.unmount()


SHA = {}
TIMEOUT_MS = 200  # --timeout: shared_timeout of the mounts
COUNTERS = ("fleet_timeouts_total", "fleet_redirects_total", "fleet_errors_total",
            "fleet_lock_waits_total", "fleet_lock_gave_up_total", "fleet_put_drops_total",
            "fleet_put_errors_total", "fleet_store_fetches_total")


def counters(sts):
    """The shared tier's counters of interest, summed over the mounts' stats @sts."""
    out = {k: sum(s.v(k, "shared") for s in sts) for k in COUNTERS}
    out["read_errors"] = sum(s.v("read_errors_total") for s in sts)
    return out


def main():
    args = sys.argv[1:]
    pace = float(args[args.index("--pace") + 1]) if "--pace" in args else 24.0
    out = args[args.index("--json") + 1] if "--json" in args else None
    full = "--full-coverage" in args
    global TIMEOUT_MS
    TIMEOUT_MS = int(args[args.index("--timeout") + 1]) if "--timeout" in args else 200
    work = Path(tempfile.mkdtemp(prefix="shared-cluster-", dir="/var/tmp"))
    root = work / "store"
    rels = [f"new/n-{i:02d}.bin" for i in range(N)]
    for rel in rels:
        SHA[rel] = corpus.sha256_file(corpus.build_one(root, rel, SIZE, seed=7))
    ng = lu.TimedNginx(root, work / "nginx")
    ng.start()
    c = Cluster(work / "cluster", full_coverage=full)
    res = {"blocks": N * SIZE // BS, "pace_mib_s": pace, "full_coverage": full,
           "shared_timeout_ms": TIMEOUT_MS}
    try:
        if "--plain" in args:  # the share row on one plain redis-server, to compare
            r = Redis(work / "plain").start()
            try:
                fetched, worst, sts, _, secs = run(ng, work, r.url(), rels, "plain", 0)
            finally:
                r.stop()
            res["plain"] = {"store_x": fetched / res["blocks"], "worst_read_s": worst,
                            "seconds": secs, **counters(sts)}
            print(f"plain: one redis-server: {fetched:.0f} blocks at the store "
                  f"({res['plain']['store_x']:.2f}x); {counters(sts)}")
        c.start()
        url = f"redis://127.0.0.1:{c.nodes[0].port}"
        fetched, worst, sts, _, secs = run(ng, work, url, rels, "share", 0)
        res["share"] = {"store_x": fetched / res["blocks"], "worst_read_s": worst,
                        "seconds": secs, **counters(sts)}
        print(f"share: 3 mounts, {res['blocks']} blocks: {fetched:.0f} blocks at the store "
              f"({res['share']['store_x']:.2f}x), worst 1 MiB read {worst:.3f}s; "
              f"{ {k: v for k, v in res['share'].items() if k.startswith('shared')} }")
        held = c.block_keys()
        per = {m.port: sum(1 for x in held.values() if x is m) for m in c.masters()}
        victim = c.node(max(per, key=per.get))
        vslot = slot(victim, next(k for k, m in held.items() if m is victim))
        down = per[victim.port]
        for m in c.masters():
            m.cmd("FLUSHALL")
        harness.wait_until(lambda: not c.block_keys(), 10, "the cluster emptied")
        survivor = next(m for m in c.masters() if m is not victim)
        secs_share = SIZE * N / MIB / pace

        def kill(t0):
            time.sleep(max(0.0, t0 + secs_share / 3 - time.monotonic()))
            victim.proc.kill()
            victim.proc.wait()
            tk = time.monotonic()
            while time.monotonic() - tk < 60:
                new = c.master_of(vslot, via=survivor)
                if new not in (None, victim):
                    return time.monotonic() - tk
                time.sleep(0.05)
            return None

        fetched, worst, sts, promoted, secs = run(ng, work, url, rels, "failover", pace, kill)
        extra = fetched - res["blocks"]
        res["failover"] = {"store_blocks": fetched, "extra_blocks": extra,
                           "blocks_on_dead_master": down, "bound": 3 * down,
                           "promoted_s": promoted, "worst_read_s": worst, "seconds": secs,
                           **counters(sts)}
        print(f"failover: master with {down} of {res['blocks']} blocks killed at "
              f"{secs_share / 3:.1f}s of a {secs:.1f}s run, replica promoted after "
              f"{promoted}s; {fetched:.0f} blocks at the store, {extra:.0f} beyond one each "
              f"(bound: 3 mounts x {down} = {3 * down}); worst 1 MiB read {worst:.3f}s")
    finally:
        c.stop()
        ng.stop()
        if "--keep" not in args:  # the objects and the mounts' logs: --keep leaves them
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(res))
    if out:
        Path(out).write_text(json.dumps(res, indent=1) + "\n")
    ok = res["share"]["store_x"] <= 1.1 and res["failover"]["extra_blocks"] <= \
        res["failover"]["bound"]
    return 0 if ok else 1


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
