#!/usr/bin/env python3
"""tierfs binaries' writes to one s3rver (tests/integration's, started here), alternating
(the order reversed every other round), 1 MiB writes, each object checked whole by a HEAD
after close() and deleted. Run as root, after scripts/bootstrap (s3rver's node_modules).

    RUNS=4 MIB=64 python3 bench/write_ab_s3.py OLD/tierfs,NEW/tierfs

Prints each binary's median MB/s and every run. Used for issue 40 (docs/performance.md).
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import harness  # noqa: E402

B = sys.argv[1].split(","); RUNS = int(os.environ.get("RUNS", 3)); SIZE = int(os.environ.get("MIB", 64)) << 20
work = tempfile.mkdtemp(prefix="s3ab-", dir=None)
s = harness.S3rver(work + "/s3").start()
c = s.client(); c.create_bucket(Bucket="bkt")
data = os.urandom(SIZE); P = []; M = []
env = dict(os.environ, **harness.S3_ENV)
try:
    for i, b in enumerate(B):
        mp = f"{work}/m{i}"; os.makedirs(mp); M.append(mp)
        P.append(subprocess.Popen([b, "s3://bkt", mp, "-f", "-o", f"allow_write,endpoint={s.endpoint},path_style,region=us-east-1"], env=env, stderr=open(f"{work}/t{i}.log", "w")))
    for mp in M:
        for _ in range(200):
            if os.path.ismount(mp): break
            time.sleep(0.05)
    res = {}
    for r in range(RUNS):
        order = list(range(len(B)))
        if r % 2: order.reverse()
        for i in order:
            t0 = time.monotonic(); fd = os.open(f"{M[i]}/f{i}-{r}", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            mv = memoryview(data); off = 0
            while off < SIZE: off += os.write(fd, mv[off:off + (1 << 20)])
            os.close(fd); res.setdefault(i, []).append(SIZE / (time.monotonic() - t0) / 1e6)
            assert c.head_object(Bucket="bkt", Key=f"f{i}-{r}")["ContentLength"] == SIZE
            c.delete_object(Bucket="bkt", Key=f"f{i}-{r}")
    for i, b in enumerate(B):
        print(b, round(statistics.median(res[i])), [round(x) for x in res[i]])
finally:
    for mp in M: subprocess.run(["fusermount3", "-u", mp])
    for p in P: p.wait()
    s.stop(); shutil.rmtree(work)
