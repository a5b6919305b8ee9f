#!/usr/bin/env python3
"""Two tierfs binaries against each other on one file:// store, rounds interleaved (A B, then
B A), so that a shared machine's noise falls on both alike: cold reads (from the store) and
cached reads (tierfs's hot tier, the kernel's page cache dropped before each read). Run as
root (it mounts, and writes /proc/sys/vm/drop_caches).

    python3 bench/ab.py OLD/tierfs NEW/tierfs [ROUNDS] [WORKDIR]

Used for issue 27's before/after (docs/performance.md). Prints the medians and every run.
"""
import os
import statistics
import subprocess
import sys
import time


def drop():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def read(path):
    t = time.monotonic()
    n = 0
    with open(path, "rb", buffering=0) as f:
        while b := f.read(1 << 20):
            n += len(b)
    return n / (time.monotonic() - t) / 1e6


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    bins = {"A": sys.argv[1], "B": sys.argv[2]}
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    work = sys.argv[4] if len(sys.argv) > 4 else "/var/tmp/tierfs-ab"
    store = os.path.join(work, "store")
    obj = os.path.join(store, "seg.bin")
    os.makedirs(store, exist_ok=True)
    if not os.path.exists(obj) or os.path.getsize(obj) != 512 << 20:
        with open(obj, "wb") as f:
            for _ in range(512):
                f.write(os.urandom(1 << 20))
    res = {k: {"cold": [], "cached": []} for k in bins}
    for r in range(rounds):
        order = list(bins.items()) if r % 2 == 0 else list(reversed(bins.items()))
        for name, b in order:
            mnt = os.path.join(work, "mnt-" + name)
            os.makedirs(mnt, exist_ok=True)
            subprocess.run([b, "file://" + store, mnt, "-o", "hot_size=1G,block_size=4M"],
                           check=True)
            try:
                os.utime(obj)  # a new object: the hot tier
                drop()
                res[name]["cold"].append(read(os.path.join(mnt, "seg.bin")))
                drop()
                res[name]["cached"].append(read(os.path.join(mnt, "seg.bin")))
            finally:
                subprocess.run(["fusermount3", "-u", mnt], check=False)
                while os.path.ismount(mnt):
                    time.sleep(0.1)
    for name, b in bins.items():
        c, h = res[name]["cold"], res[name]["cached"]
        print(f"{name} {b}: cold MB/s median {statistics.median(c):.0f} "
              f"{sorted(round(x) for x in c)}; cached median {statistics.median(h):.0f} "
              f"{sorted(round(x) for x in h)}")
    med = {k: {m: statistics.median(v) for m, v in res[k].items()} for k in res}
    print("B/A: cold %.2fx, cached %.2fx" % (med["B"]["cold"] / med["A"]["cold"],
                                            med["B"]["cached"] / med["A"]["cached"]))


if __name__ == "__main__":
    main()
