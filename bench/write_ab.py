#!/usr/bin/env python3
"""tierfs binaries' file:// writes against the FUSE write ceiling (bench/nullfs -w) and a local
file + fsync, in one run, interleaved (the order rotates each round), so that a shared
machine's noise falls on all alike. Each binary mounts its own fresh store directory with
allow_write and its defaults (extra options: TOPTS=",hot_size=128M"). Run as root.

    python3 bench/write_ab.py TIERFS[,TIERFS2...] NULLFS

Environment: RUNS (rounds, 3), MIB (file size, 64), BSS (write sizes, "1048576,8192"),
FRESH=1 (remount everything each round: each file is a fresh mount's first, the hot tier's
arena and the write buffers untouched yet). Prints medians, ratios and every run, and the
mount processes' CPU seconds per GiB written. Used for issue 40 (docs/performance.md).
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TIERFS = sys.argv[1].split(",")
NULLFS = sys.argv[2]
RUNS = int(os.environ.get("RUNS", 3))
SIZE = int(os.environ.get("MIB", 64)) << 20
BSS = [int(x) for x in os.environ.get("BSS", "1048576,8192").split(",")]
FRESH = os.environ.get("FRESH") == "1"
DATA = os.urandom(SIZE)


def wait_mount(p):
    for _ in range(600):
        if os.path.ismount(p):
            return
        time.sleep(0.05)
    raise SystemExit(f"{p}: not mounted after 30 s")


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def write(path, bs, fsync):
    t0 = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    mv, off = memoryview(DATA), 0
    while off < SIZE:
        off += os.write(fd, mv[off:off + bs])
    if fsync:
        os.fsync(fd)
    os.close(fd)
    return SIZE / (time.monotonic() - t0) / 1e6


class Mounts:
    """One mount per tierfs binary ("t0", "t1"...) and nullfs -w ("nullfs"), under @base."""

    def __init__(self, base):
        self.base, self.procs, self.dirs = base, {}, {}
        for i, binary in enumerate(TIERFS):
            mp, st = f"{base}/mt{i}", f"{base}/store{i}"
            os.makedirs(mp), os.makedirs(st)
            self.start(f"t{i}", [binary, f"file://{st}", mp, "-f", "-o",
                                 "allow_write" + os.environ.get("TOPTS", "")], mp, st)
        mp, st = f"{base}/mn", f"{base}/null"
        os.makedirs(mp), os.makedirs(st)
        self.start("nullfs", [NULLFS, mp, "x=4K", "-w", st, "-f"], mp, st)
        for mp, _ in self.dirs.values():
            wait_mount(mp)

    def start(self, name, argv, mp, st):
        self.procs[name] = subprocess.Popen(argv, stderr=open(f"{self.base}/{name}.log", "w"))
        self.dirs[name] = (mp, st)

    def stop(self):
        for name, (mp, _) in self.dirs.items():
            subprocess.run(["fusermount3", "-u", mp])
            self.procs[name].wait()


def main():
    work = tempfile.mkdtemp(prefix="write-ab-")
    local = f"{work}/local"
    os.makedirs(local)
    res, cpus, m, systems = {}, {}, None, [f"t{i}" for i in range(len(TIERFS))] + [
        "nullfs", "local"]
    try:
        for r in range(RUNS):
            if m is None or FRESH:
                if m:
                    m.stop()
                m = Mounts(tempfile.mkdtemp(prefix=f"r{r}-", dir=work))
            for bs in BSS:
                k = r % len(systems)
                for s in systems[k:] + systems[:k]:
                    key, c = f"f{r}-{bs}", None
                    if s == "local":
                        v = write(f"{local}/{key}", bs, True)
                        os.unlink(f"{local}/{key}")
                    else:
                        (mp, st), pid = m.dirs[s], m.procs[s].pid
                        c0 = cpu(pid)
                        v = write(f"{mp}/{key}", bs, False)  # close() commits: fsync, rename
                        c = (cpu(pid) - c0) / (SIZE / 2**30)
                        if os.path.getsize(f"{st}/{key}") != SIZE:
                            raise SystemExit(f"{s}: {key} is not whole in the store")
                        os.unlink(f"{st}/{key}")
                    res.setdefault((bs, s), []).append(v)
                    cpus.setdefault((bs, s), []).append(c)
    finally:
        if m:
            m.stop()
        shutil.rmtree(work)
    med = statistics.median
    for bs in BSS:
        n, lo = med(res[(bs, "nullfs")]), med(res[(bs, "local")])
        print(f"{bs} B writes, {SIZE >> 20} MiB, {RUNS} runs{' (fresh mounts)' if FRESH else ''}:"
              f" ceiling (nullfs -w) {n:.0f} MB/s {[round(x) for x in res[(bs, 'nullfs')]]},"
              f" local + fsync {lo:.0f} {[round(x) for x in res[(bs, 'local')]]},"
              f" ceiling CPU s/GiB {med(cpus[(bs, 'nullfs')]):.2f}")
        for i, binary in enumerate(TIERFS):
            t = med(res[(bs, f"t{i}")])
            print(f"  {binary}: {t:.0f} MB/s {[round(x) for x in res[(bs, f't{i}')]]}: "
                  f"{t / n:.2f}x the ceiling, {t / lo:.2f}x local; CPU s/GiB "
                  f"{med(cpus[(bs, f't{i}')]):.2f}")


if __name__ == "__main__":
    main()
