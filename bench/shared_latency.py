#!/usr/bin/env python3
"""How long a shared-tier GET takes on this machine, alone and behind SETs of blocks: the
measurement behind shared_timeout's default (fs/opts.c) and the second Redis connection per
server for SETs (backend/redis.c).

Starts its own redis-server on a free port (no persistence, allkeys-lru, as docs/caching.md
says a fleet runs it), writes a value of one block plus the 80-byte header, and measures the time
from sending a GET to having its whole reply:

  alone          one connection, nothing else in flight
  behind N SETs  the same connection: N SETs of blocks written just before the GET, as one
                 connection for everything queued them (the first pass of backend/redis.c)
  own conn       the GET on its own connection while another connection keeps writing SETs
                 of blocks without pause (redis-benchmark), as with a connection for SETs

    python3 bench/shared_latency.py [--block 4M] [--n 300]
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from harness import free_port, stop_process, wait_for_port  # noqa: E402

MIB = 1 << 20
MAXMEM = [] if os.environ.get("NOMAXMEM") else ["--maxmemory", "512mb"]


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def read_reply(f):
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"-":
        raise RuntimeError(rest.decode())
    return rest


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p / 100))]


def summary(name, v):
    ms = [x * 1e3 for x in v]
    print(f"{name:28s} p50 {pct(ms, 50):7.2f}  p90 {pct(ms, 90):7.2f}  p99 {pct(ms, 99):7.2f}  "
          f"max {max(ms):7.2f} ms  (n={len(ms)})", flush=True)
    return {"p50": pct(ms, 50), "p99": pct(ms, 99), "max": max(ms)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--block", default="4M")
    ap.add_argument("--n", type=int, default=300)
    a = ap.parse_args()
    bs = int(a.block[:-1]) * MIB if a.block[-1] in "Mm" else int(a.block)
    value = os.urandom(80) + os.urandom(bs)
    d = tempfile.mkdtemp(prefix="shared-lat-")
    port = free_port()
    log = open(os.path.join(d, "redis.log"), "wb")
    srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no", *MAXMEM,
                            "--maxmemory-policy", "allkeys-lru", "--dir", d],
                           stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    bench = None
    try:
        wait_for_port(port, srv, "redis-server")
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = s.makefile("rb")
        s.sendall(resp("SET", "k", value))
        read_reply(f)
        get = resp("GET", "k")

        def timed_get():
            t = time.perf_counter()
            s.sendall(get)
            assert len(read_reply(f)) == len(value)
            return time.perf_counter() - t

        print(f"block {bs // MIB} MiB + 80 B, redis-server on 127.0.0.1:{port}, "
              f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cpus")

        def behind(nset):
            # the GET queued right after the SETs, on their connection
            sets = b"".join(resp("SET", f"w{i}", value) for i in range(nset))
            t = time.perf_counter()
            s.sendall(sets + get)
            for _ in range(nset):
                read_reply(f)
            assert len(read_reply(f)) == len(value)
            return time.perf_counter() - t

        # rounds of every case in turn, so that the machine's load (shared, and changing)
        # weighs on each case alike
        res = {"GET alone": [], "GET behind 1 SET": [], "GET behind 4 SETs": [],
               "GET, own conn, SETs beside": []}
        bench_argv = ["redis-benchmark", "-p", str(port), "-t", "set", "-d",
                      str(len(value)), "-c", "1", "-n", "1000000", "-q"]
        for _ in range(max(1, a.n // 10)):
            for _ in range(10):
                res["GET alone"].append(timed_get())
            for _ in range(3):
                res["GET behind 1 SET"].append(behind(1))
            for _ in range(3):
                res["GET behind 4 SETs"].append(behind(4))
            # one connection writing blocks without pause; the GETs on their own
            bench = subprocess.Popen(bench_argv, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
            # not a condition to poll: the writer has connected and sent its first SETs
            time.sleep(0.3)
            for _ in range(10):
                res["GET, own conn, SETs beside"].append(timed_get())
            stop_process(bench)
            bench = None
        for k, v in res.items():
            summary(k, v)
    finally:
        if bench:
            stop_process(bench)
        stop_process(srv)


if __name__ == "__main__":
    main()
