#!/usr/bin/python3
"""One fresh mount reads eight new 16 MiB objects from a loopback nginx, with and without
shared= (an empty redis-server each time), runs interleaved; prints MiB/s per run and the
medians. What issue 13's second cost is measured with:

    TIERFS_BIN=$PWD/build/tierfs /usr/bin/python3 bench/shared_single.py [runs] [-- opts]

--perf: record the shared mount of each run with perf (perf-<i>-<label>.data in the work
directory; PERF_ALL=1 the alone mount too, PERF_EVENT the event (cpu-clock), PERF_CG the call
graph mode (fp; dwarf for libraries built without frame pointers)).
--fill: fill each redis-server past its maxmemory first (redis-benchmark, 4 MiB values), so
that it runs full and evicting, as a fleet's Redis does after its first hour: an empty one
stores every value in memory it has never touched, which this VM backs at a few hundred MB/s.
--hits: before each shared run another mount reads the objects through the same Redis, so the
measured mount finds every block there (the GET path: a fleet member reading what another
fetched).
As root (it mounts and drops the page cache).
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))

import corpus  # noqa: E402
import harness  # noqa: E402
from test_shared import Redis, drop_caches  # noqa: E402

MIB = 1 << 20
N, SIZE = 8, 16 * MIB


def proc_stat(m):
    """tierfs's page faults so far (minor + major: memory it touched for the first time) and
    its CPU seconds (user + system)"""
    f = (Path("/proc") / str(m.pids[0]) / "stat").read_text().rsplit(")", 1)[1].split()
    return int(f[7]) + int(f[9]), (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def read_all(m, rels):
    t0 = time.monotonic()
    for rel in rels:
        with open(m.mnt / rel, "rb", buffering=0) as f:
            while f.read(MIB):
                pass
    return N * SIZE / MIB / (time.monotonic() - t0)


def main():
    args = sys.argv[1:]
    perf = "--perf" in args
    fill = "--fill" in args
    hits = "--hits" in args
    args = [a for a in args if a not in ("--perf", "--fill", "--hits")]
    extra = args[args.index("--") + 1:] if "--" in args else []
    runs = int(args[0]) if args and args[0] != "--" else 3
    work = Path(tempfile.mkdtemp(prefix="shared-single-", dir="/var/tmp"))
    root = work / "store"
    rels = [f"n-{i}.bin" for i in range(N)]
    for rel in rels:
        corpus.build_one(root, rel, SIZE, seed=5)
    ng = harness.Nginx(root, work / "nginx")
    ng.start()
    res = {"alone": [], "shared": []}
    cpu = {"alone": [], "shared": []}  # tierfs CPU seconds per read
    try:
        for i in range(runs):
            for label in ("alone", "shared") if i % 2 == 0 else ("shared", "alone"):
                r = Redis(work / f"redis-{i}-{label}").start() if label == "shared" else None
                if r and fill:
                    r.fill()
                # the objects are new (mtime now): a fresh mount reads them as hot blocks
                now = time.time()
                for rel in rels:
                    os.utime(root / rel, (now, now))
                o = ["block_size=4M", *extra] + ([f"shared={r.url()}"] if r else [])
                if r and hits:
                    pm = harness.Mount(ng.url, work / f"mnt-{i}-prime", o, logdir=work).start()
                    try:
                        read_all(pm, rels)
                        queued = 'tierfs_fleet_put_queued_bytes{tier="fleet"} 0'
                        harness.wait_until(lambda: queued in (pm.mnt / ".tierfs" / "stats")
                                           .read_text().splitlines(),
                                           30, "the priming mount's SETs")
                    finally:
                        pm.unmount()
                m = harness.Mount(ng.url, work / f"mnt-{i}-{label}", o, logdir=work).start()
                p = None
                try:
                    drop_caches()
                    if perf and (r or os.environ.get("PERF_ALL")):
                        p = subprocess.Popen(["perf", "record",
                                              "-e", os.environ.get("PERF_EVENT", "cpu-clock"),
                                              "--call-graph", os.environ.get("PERF_CG", "fp"),
                                              "-o", str(work / f"perf-{i}-{label}.data"), "-p",
                                              ",".join(str(x) for x in m.pids)],
                                             stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL)
                        time.sleep(0.5)
                    f0, c0 = proc_stat(m)
                    res[label].append(read_all(m, rels))
                    f1, c1 = proc_stat(m)
                    cpu[label].append(c1 - c0)
                    # a fresh mount's first touch of its heap (the SET queue's high-water
                    # mark, up to put_limit) shows here, not a cost per SET
                    print(f"  page faults in tierfs during the read: {f1 - f0}, "
                          f"its CPU: {c1 - c0:.2f} s", flush=True)
                    if r:  # what the shared tier did: timeouts, locks, a server paused
                        st = (m.mnt / ".tierfs" / "stats").read_text().splitlines()
                        print("  " + " ".join(
                            ln.split("{")[0].replace("tierfs_fleet_", "") + "=" + ln.split()[-1]
                            for ln in st if ln.startswith("tierfs_fleet_")
                            and not ln.endswith(" 0")), flush=True)
                finally:
                    if p:
                        p.send_signal(2)
                        p.wait()
                    m.unmount()
                    if r:
                        r.stop()
                print(f"run {i + 1} {label}: {res[label][-1]:.0f} MiB/s", flush=True)
    finally:
        ng.stop()
    med = {k: sorted(v)[len(v) // 2] for k, v in res.items()}
    mcpu = {k: sorted(v)[len(v) // 2] for k, v in cpu.items()}
    print(f"median of {runs}: alone {med['alone']:.0f} MiB/s, shared {med['shared']:.0f} MiB/s "
          f"= {med['shared'] / med['alone']:.2f}x; tierfs CPU per read alone "
          f"{mcpu['alone']:.2f} s, shared {mcpu['shared']:.2f} s  (work dir {work})")


if __name__ == "__main__":
    main()
