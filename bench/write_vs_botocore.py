#!/usr/bin/env python3
"""S3 writes through a tierfs mount against botocore's multipart upload of the same bytes to
the same store, in one run (issue 40, item 2: tierfs >= 0.9x). The store is Ceph RGW
(tests/integration/rgw.py: ceph-mon, ceph-osd, radosgw) or s3rver (harness.S3rver), started
here on 127.0.0.1 and stopped at the end, also on failure. Run as root after scripts/bootstrap.

    STORE=rgw RUNS=6 MIB=128 python3 bench/write_vs_botocore.py [build/tierfs]

After untimed writes that fill the mount's hot tier once, each round writes MIB MiB of
random bytes once each way, in an order swapped every round: tierfs (1 MiB write()s to a new
file, timed from open to close's return: close answers the upload) and botocore
(tierbench's multipart_upload: 8 MiB parts, 4 in flight, tierfs's part_size and write_parts
defaults), each object checked whole by a HEAD, then deleted. Prints every figure, the
medians and their ratio, and "met" or "missed"; exits 1 if a write failed or came out short.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402
import rgw as rgwlib  # noqa: E402
from tierbench.common import cpu_seconds, multipart_upload  # noqa: E402

STORE = os.environ.get("STORE", "rgw")
RUNS = int(os.environ.get("RUNS", 6))
SIZE = int(os.environ.get("MIB", 128)) << 20
TARGET = 0.9
TIERFS = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                         os.path.join(HERE, "..", "build", "tierfs"))


def tierfs_write(mp, key, data):
    t0 = time.monotonic()
    fd = os.open(os.path.join(mp, key), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        off = 0
        while off < len(data):
            off += os.write(fd, data[off:off + (1 << 20)])
    finally:
        os.close(fd)
    return time.monotonic() - t0


def botocore_write(c, key, data):
    t0 = time.monotonic()
    multipart_upload(c, "bkt", key, data)  # 8 MiB parts, 4 in flight: tierfs's defaults
    return time.monotonic() - t0


def main():
    work = tempfile.mkdtemp(prefix="wvb-")
    srv = proc = None
    mp = os.path.join(work, "m")
    try:
        if STORE == "rgw":
            why = rgwlib.missing()
            if why:
                sys.exit(f"write_vs_botocore: {why}")
            srv = rgwlib.Rgw(os.path.join(work, "store"))
            srv.start()
            env = {"AWS_ACCESS_KEY_ID": srv.access_key, "AWS_SECRET_ACCESS_KEY": srv.secret_key}
        elif STORE == "s3rver":
            srv = harness.S3rver(os.path.join(work, "store")).start()
            env = harness.S3_ENV
        else:
            sys.exit(f"write_vs_botocore: STORE={STORE}: rgw or s3rver")
        c = srv.client()
        c.create_bucket(Bucket="bkt")
        os.makedirs(mp)
        log = open(os.path.join(work, "tierfs.log"), "w")
        proc = subprocess.Popen(
            [TIERFS, "s3://bkt", mp, "-f", "-o",
             f"allow_write,endpoint={srv.endpoint},path_style,region=us-east-1"],
            env=dict(os.environ, **env), stdout=log, stderr=log)
        harness.wait_until(lambda: proc.poll() is not None or harness.mounted(mp), 30,
                           "the mount")
        if proc.poll() is not None:
            sys.exit(f"write_vs_botocore: tierfs exited {proc.returncode}: "
                     + harness.tail(log.name))
        data = memoryview(os.urandom(SIZE))
        # untimed: connections open, the store warmed, and the hot tier's memory backed:
        # writes fill the hot tier (hot_size, 1 GiB by default) as they go, and the first pass
        # through its ring touches memory this VM has not backed yet (half of tierfs's CPU
        # went to the kernel zeroing pages: docs/performance.md), which a mount that has
        # run a while, or one with prefault=on, has already paid
        for i in range(((1 << 30) + SIZE - 1) // SIZE):
            tierfs_write(mp, f"warm-t{i}", data)
            c.delete_object(Bucket="bkt", Key=f"warm-t{i}")
        botocore_write(c, "warm-b", data)
        res = {"tierfs": [], "botocore": []}
        # whose CPU each write costs: the writer (the mount, or this process for botocore)
        # and the store's processes; on 2 cores they share, a writer's CPU is the store's loss
        store_pids = ({k: p.pid for k, p in srv.procs.items()} if STORE == "rgw"
                      else {"s3rver": srv.proc.pid})
        cpu = {"tierfs": {}, "botocore": {}}
        for r in range(RUNS):
            order = ["tierfs", "botocore"] if r % 2 == 0 else ["botocore", "tierfs"]
            for who in order:
                key = f"{who}-{r}"
                os.sync()
                pids = dict(store_pids, writer=proc.pid if who == "tierfs" else os.getpid())
                c0 = {k: cpu_seconds(v) for k, v in pids.items()}
                t = (tierfs_write(mp, key, data) if who == "tierfs"
                     else botocore_write(c, key, data))
                for k, v in pids.items():
                    cpu[who].setdefault(k, []).append((cpu_seconds(v) - c0[k]) / (SIZE / 2**30))
                got = c.head_object(Bucket="bkt", Key=key)["ContentLength"]
                if got != SIZE:
                    sys.exit(f"write_vs_botocore: {who} {key}: {got} bytes of {SIZE}")
                c.delete_object(Bucket="bkt", Key=key)
                res[who].append(SIZE / t / 1e6)
                print(f"round {r + 1} {who}: {res[who][-1]:.0f} MB/s; CPU s/GiB "
                      + ", ".join(f"{k} {v[-1]:.2f}" for k, v in cpu[who].items()), flush=True)
        mt, mb = statistics.median(res["tierfs"]), statistics.median(res["botocore"])
        ratios = [a / b for a, b in zip(res["tierfs"], res["botocore"])]
        print(f"{STORE}, {SIZE >> 20} MiB objects, {RUNS} rounds: tierfs median {mt:.0f} MB/s, "
              f"botocore {mb:.0f} MB/s: {mt / mb:.2f}x (rounds {min(ratios):.2f}-"
              f"{max(ratios):.2f}x); target >= {TARGET}x: "
              + ("met" if mt / mb >= TARGET else "missed"))
        for who in cpu:
            print(f"CPU s per GiB written, medians, {who}: " + ", ".join(
                f"{k} {statistics.median(v):.2f}" for k, v in cpu[who].items()))
    finally:
        if proc is not None:
            harness.force_unmount(mp)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if srv is not None:
            srv.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
