#!/usr/bin/env python3
"""bench/cold_ab.py - fresh-mount cold reads of one object over HTTP, A/B between tierfs
binaries or option sets, with curl as the ceiling, interleaved rounds.

  bench/cold_ab.py [--rounds N] [--sleep S] OBJECT LABEL=TIERFS[:OPTS] ...

OBJECT is a local file that nginx (started here on a free loopback port, stopped at exit)
serves; each round mounts every LABEL fresh, reads OBJECT through it with dd bs=1M, unmounts,
and fetches it once with curl. --sleep waits before every read: on a VM whose host takes back
freed guest memory, a few seconds make every mount start with memory the host must back again,
as a fresh mount on a busy machine does. Prints MB/s per round and the median per label.
--perf FILE records the whole machine (perf record -a) during the first label's read in the
last round, for `perf report -i FILE --sort comm,sym`.
Run as root (drop_caches); needs the test suite's nginx (scripts/bootstrap).
"""
import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))
import harness  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sleep", type=float, default=0)
    ap.add_argument("--perf", help="perf.data to record the last round's first read into")
    ap.add_argument("object")
    ap.add_argument("cfg", nargs="+")
    a = ap.parse_args()
    obj = Path(a.object).resolve()
    mb = obj.stat().st_size / 1e6
    cfgs = [(c.split("=", 1)[0], c.split("=", 1)[1]) for c in a.cfg] + [("curl", None)]
    tmp = Path(tempfile.mkdtemp(prefix="cold_ab."))
    mnt = tmp / "mnt"
    mnt.mkdir()
    ng = harness.Nginx(obj.parent, tmp / "ng").start()
    res = {}
    try:
        for rnd in range(a.rounds):
            for label, spec in cfgs:
                time.sleep(a.sleep)
                Path("/proc/sys/vm/drop_caches").write_text("1\n")
                subprocess.run(["cat", str(obj)], stdout=subprocess.DEVNULL, check=True)  # nginx's
                if spec is None:
                    t = time.monotonic()
                    subprocess.run(["curl", "-sS", "--noproxy", "*", "-o", "/dev/null",
                                    ng.url + obj.name], check=True)
                else:
                    binary, _, opts = spec.partition(":")
                    subprocess.run([binary, ng.url, str(mnt)] + (["-o", opts] if opts else []),
                                   check=True)
                    perf = None
                    try:
                        if a.perf and rnd == a.rounds - 1 and label == cfgs[0][0]:
                            perf = subprocess.Popen(["perf", "record", "-a", "-q", "-o", a.perf,
                                                     "--", "sleep", "600"])
                            time.sleep(0.5)  # perf is recording
                        t = time.monotonic()
                        subprocess.run(["dd", f"if={mnt / obj.name}", "of=/dev/null", "bs=1M"],
                                       stderr=subprocess.DEVNULL, check=True)
                    finally:
                        if perf:
                            perf.send_signal(signal.SIGINT)
                            perf.wait()
                        subprocess.run(["fusermount3", "-u", str(mnt)], check=True)
                res.setdefault(label, []).append(mb / (time.monotonic() - t))
    finally:
        ng.stop()
    for k, v in res.items():
        print(f"{k}: MB/s {[round(x) for x in v]} median {sorted(v)[len(v) // 2]:.0f}")


if __name__ == "__main__":
    main()
