#!/usr/bin/env python3
"""The tierfs benchmark suite, run by scripts/bench (which installs packages and builds first).

Servers (127.0.0.1, free ports): one nginx with three listeners over one generated data set
(JSON autoindex for tierfs, HTML autoindex for rclone and httpdirfs, and a reverse proxy in
front of s3rver so that S3 traffic is counted in the same access log), and s3rver.

Systems: tierfs (http, and s3 via s3rver), the ceilings bench/nullfs (null FUSE filesystem,
same mount flags) and curl (one GET of the same object from the same server), the peers s3fs,
rclone mount (--vfs-cache-mode full) and httpdirfs (--cache).

Scenarios (interleaved runs A B C A B C ..., medians and min-max):
  1 cold sequential read (fresh mount, source file warm in the server's page cache)
  2 cached sequential re-read: same mount, the kernel's caches dropped first (echo 3 >
    /proc/sys/vm/drop_caches: pages, dentries and inodes), so the reads reach the
    filesystem's own cache; for tierfs a run counts only if .tierfs/stats shows that tierfs
    served every byte and fetched none, else it is reported invalid. 2b, a labelled extra
    row: the old posix_fadvise(DONTNEED) variant, which may be page-cache hits
  3 4 KiB random O_DIRECT reads of the cached object, the caches dropped before each slice
    and the same check: IOPS, p50/p99 latency
  4 16 readers of one cold object, reader i starting at i/16: bytes at the server / object
  5 isolation: tail 4 KiB O_DIRECT re-reads of a hot working set, alone and during a replay
    of old objects several times the cache size; tail hit ratio from .tierfs/stats
  6 lagging rate accuracy at 20M and 100M: bytes at the server over time, burst subtracted
  7 peak RSS (VmHWM) of every tierfs mount against hot_size + lagging_size
  8 peak RSS under load: 64 threads read 64 different cold objects at once (block_size 4M,
    hot_size 32M, lagging off, max_conns 64), against hot_size + 64 MiB
  9 broker, on http (nginx) and s3 (s3rver): a producer uploads a 64 MiB segment with its
    indexes every few seconds, a tail consumer opens each by name as soon as it exists, maps
    its index MAP_SHARED and reads it, a lagging consumer serves random old offsets (index
    lookup, 8 KiB read), paused every other segment: upload -> first byte, tail p99 alone and
    during the replay, hot hit ratio, lagging bytes at the server per byte read (see
    tests/integration/broker_sim.py; test_broker.py is the short form)
 10 metadata (issue 8), `--only meta`:
    a upload -> first byte by name: new 64 KiB objects PUT to s3rver one at a time, a reader
      per mount (tierfs-s3, s3fs, rclone mount :s3:, the peers with their documented
      freshness options) polls open + read(1) every 10 ms; p50/p99 from the PUT's answer
    b `ls -l` of 100k keys in one prefix (20k with --quick) on the http backend (s3rver
      takes minutes to be filled with as many keys, so no s3fs): drop_caches, a fresh mount,
      time and peak RSS of tierfs, rclone :http: and httpdirfs
    c tierfs behind tests/integration/faultproxy.py: once what it needs is listed and
      cached, every request to the store stalls; with 32 lookups of unknown names waiting on
      it, stats of known names and O_DIRECT reads of cached blocks, p50/p99 (bound 100 ms)
 11 random reads of old data (issue 14), `--only lagrand`: 4 KiB O_DIRECT random reads of a
    cold lagging object, 4 threads, default lagging_rate and block_size: IOPS against what
    whole-block fetches allow at that rate (rate / block_size), and KiB fetched per read;
    11b the same reads of that object as a hot one 4x the hot tier (parts too)
  disk (--only disk): the disk tier (cache_dir). A disk hit (memory tiers empty, page cache
    dropped) against preading the same bytes from a local file on the same disk; recovery of
    a large cache at mount (filled by bench/diskfill through disk.c), mount to first answer;
    a warm restart (clean unmount, page cache dropped): bytes fetched from the store and time
    to re-read the working set, tierfs vs s3fs (use_cache) and rclone (--vfs-cache-mode full)
 12 a fleet on one Redis (--only shared): 1, 2 and 3 mounts read the same new objects at once,
    each from its own share of them, with and without shared=: bytes at the server per byte of
    the objects, and the p99 of the readers' 1 MiB reads (worst mount); then 3 shared mounts
    again, each reader paced at shared_pace (a consumer tailing at a broker's rate, not at
    full speed)
 13 fleet_lagging_rate over 3 mounts replaying old objects: the slope of bytes at the server
    over the fetches' start times, from 1 s after the first, against the rate
 12c the MAC's cost on a shared hit (--only mac): a fresh mount reads the new objects, every
    block from Redis (another mount put them there), with shared_key and without: MiB/s, rounds
    interleaved, each on a fresh mount with its memory taken at mount (prefault=on)
  trace (--only trace, issue 31): full-speed cached reads of one mount with trace=FILE against
    one without, interleaved: 1 MiB sequential (MB/s) and 4 KiB O_DIRECT random (IOPS), each
    pass checked to be served by tierfs; the ratio on/off (target >= 0.95), and every read
    recorded, none dropped
  sim (--only sim, issue 31): tierfs-sim's speed on one core: one broker's hour of the sizing
    example (docs/sizing.md) replayed, reads per second of CPU (target >= 1M); and a fleet of
    100 such brokers over an hour, wall time of the replay (target < 60 s). The generated
    traces are kept in BENCH_WORK between runs

  write (--only write, issue 29): writing through the mount, every file seq_size bytes
    W1 sequential write, 1 MiB and 8 KiB writes (Files.copy writes 8 KiB), open() to close():
       to s3rver, tierfs (defaults + allow_write) against s3fs and rclone mount :s3:
       --vfs-cache-mode writes (timed to the object's arrival: it uploads after close), every
       object checked whole by a HEAD; to file://, against the same loop writing a local file
       on the same filesystem + fsync. One mount per system for all runs, a first write untimed
    W2 the written object read back after drop_caches: bytes fetched from the store
       (tierfs_backend_received_bytes_total), (a) the writing mount, (b) a second mount sharing
       its Redis once the writer put the blocks there; sha256 of the bytes read
    W3 peak RSS (VmHWM) while 4 files are written at once, against hot_size + lagging_size +
       64 MiB + write_buffer (tierfs_memory_bound_bytes)

Everything started here is recorded in RUN/state (mounts, pids) so that scripts/bench's trap
can clean up even if this process is killed; this process cleans up itself on any exit.
"""

import argparse
import atexit
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DISKFILL = None  # bench/diskfill (main)
SIM = None  # sim/tierfs-sim (main)
# The integration harness's helpers: polling, ports, mount checks, stopping our processes.
sys.path.insert(0, str(REPO / "tests" / "integration"))
from harness import free_port, port_open, wait_until  # noqa: E402
from harness import mounted as is_mounted  # noqa: E402
from harness import stop_process as stop_proc  # noqa: E402
import broker_sim  # noqa: E402
MiB = 1 << 20
GiB = 1 << 30
# Scenario 10's peers with their documented freshness options (s3fs(1), `rclone mount --help`):
# s3fs's stat cache entries expire after 1 s (its negative cache, enable_noobj_cache, is off by
# default); rclone re-lists a directory after 1 s (--poll-interval 0: S3 has no change
# notifications to poll anyway).
META_S3FS_OPTS = "stat_cache_expire=1"
META_RCLONE_OPTS = "--dir-cache-time 1s --poll-interval 0"

# ------------------------------------------------------------------------------------------
# bookkeeping: every process and mount we start, so that nothing outlives us


class State:
    def __init__(self):
        self.procs = []  # Popen objects we started (by pid only)
        self.mounts = []  # mountpoints we mounted
        self.file = None

    def save(self):
        if not self.file:
            return
        lines = [f"mount {m}" for m in self.mounts]
        lines += [f"pid {p.pid}" for p in self.procs if p.poll() is None]
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(self.file)

    def add_proc(self, p):
        self.procs.append(p)
        self.save()

    def add_mount(self, m):
        self.mounts.append(str(m))
        self.save()

    def drop_mount(self, m):
        if str(m) in self.mounts:
            self.mounts.remove(str(m))
        self.save()


STATE = State()


def log(msg):
    print(f"bench: {msg}", flush=True)


def unmount(mnt, proc=None):
    """Unmount @mnt (ours), then wait for its server @proc (ours) to end."""
    mnt = str(mnt)
    for i in range(10):
        if not is_mounted(mnt):
            break
        r = subprocess.run(["fusermount3", "-u", mnt], capture_output=True, text=True)
        if r.returncode == 0:
            break
        time.sleep(0.2 * (i + 1))
    if is_mounted(mnt):
        subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
    if proc is not None:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            stop_proc(proc)
    STATE.drop_mount(mnt)


def cleanup():
    for m in list(STATE.mounts):
        try:
            unmount(m)
        except Exception as e:  # keep going: everything else must still stop
            log(f"cleanup: unmounting {m}: {e}")
    for p in STATE.procs:
        stop_proc(p)
    STATE.procs.clear()
    STATE.save()


def on_signal(signum, frame):
    raise SystemExit(128 + signum)


# ------------------------------------------------------------------------------------------
# helpers


def run(cmd, timeout=None, check=True, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}): "
                           f"{r.stderr.strip()[-2000:]}")
    return r


def preader(args, timeout=600):
    r = run([str(PREADER)] + [str(a) for a in args], timeout=timeout)
    return json.loads(r.stdout.strip().splitlines()[-1])


def median(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def percentile(v, q):
    """The @q-th percentile of @v, interpolated between the closest ranks (None if empty)."""
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    k = (len(v) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def vm_hwm(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def cpu_seconds(pid):
    """User + system CPU time of process @pid so far (every thread), None if it is gone."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def size_opt(n):
    return f"{n // MiB}M"


def drop_caches():
    """Drop the kernel's page cache, dentries and inodes, for every filesystem alike.
    posix_fadvise(DONTNEED) does not reliably drop a FUSE file's pages, and only dropping
    inodes shows a cache that loses its blocks when the kernel forgets an inode. Dirty pages
    are written first: drop_caches leaves them, and a file written just before would be read
    from memory."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


FETCH_KEYS = [f'tierfs_cache_{k}{{tier="{t}"}}' for k in ("fetches_total", "fetched_bytes_total")
              for t in ("hot", "lagging")]


def served_check(st0, st1, nbytes):
    """Between two tierfs stats: did tierfs itself answer @nbytes (read_bytes_total grew by
    at least that) and fetch nothing? @return None if so, else what went wrong."""
    why = []
    served = stat_delta(st0, st1, "tierfs_read_bytes_total")
    if served < nbytes:
        why.append(f"tierfs served {served:.0f} of {nbytes} bytes")
    fetched = {k: stat_delta(st0, st1, k) for k in FETCH_KEYS if stat_delta(st0, st1, k)}
    if fetched:
        why.append("fetched " + ", ".join(f"{k} +{v:.0f}" for k, v in fetched.items()))
    return "; ".join(why) or None


# ------------------------------------------------------------------------------------------
# the data set


def write_object(path, size):
    """@size bytes of incompressible data, 1 MiB at a time."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        left = size
        while left:
            n = min(left, MiB)
            f.write(os.urandom(n))
            left -= n
    tmp.rename(path)


def make_dataset(root, p):
    """seq.bin, hot/hot-N.bin, old/old-N.bin; reused when already there with these sizes."""
    want = {"seq.bin": p["seq_size"]}
    for i in range(p["hot_files"]):
        want[f"hot/hot-{i}.bin"] = p["hot_file_size"]
    for i in range(p["old_files"]):
        want[f"old/old-{i}.bin"] = p["old_file_size"]
    for rel, size in want.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        if not f.exists() or f.stat().st_size != size:
            log(f"generating {rel} ({size // MiB} MiB)")
            write_object(f, size)
    # hot objects modified now, old ones a month ago (nginx's Last-Modified is the mtime)
    now = time.time()
    for rel in want:
        t = now - 30 * 86400 if rel.startswith("old/") else now
        os.utime(root / rel, (t, t))
    return want


def warm(paths):
    """Read the source files once so the servers send them from the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(8 * MiB):
                pass


# ------------------------------------------------------------------------------------------
# servers

NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    default_type application/octet-stream;
    log_format bench '$msec $request_time $server_port $status $body_bytes_sent '
                     '"$request_method" "$uri" "$http_range"';
    access_log {d}/access.log bench;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    {extra_temp}
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    keepalive_timeout 120s;
    server {{
        listen 127.0.0.1:{json_port};
        root {root};
        autoindex on;
        autoindex_format json;
        etag on;
    }}
    server {{
        listen 127.0.0.1:{html_port};
        root {root};
        autoindex on;
        etag on;
    }}
    server {{
        listen 127.0.0.1:{proxy_port};
        client_max_body_size 0;
        location / {{
            proxy_pass http://127.0.0.1:{s3_port};
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_buffer_size 1m;
            proxy_buffers 4 1m;
            proxy_busy_buffers_size 2m;
        }}
    }}
}}
"""


class Nginx:
    def __init__(self, d, root, s3_port):
        self.dir, self.root, self.s3_port = Path(d), Path(root), s3_port

    def start(self):
        (self.dir / "tmp").mkdir(parents=True, exist_ok=True)
        v = run(["nginx", "-V"]).stderr
        extra = ""
        if "--without-http_uwsgi_module" not in v:
            extra += f"uwsgi_temp_path {self.dir}/tmp/uwsgi; "
        if "--without-http_scgi_module" not in v:
            extra += f"scgi_temp_path {self.dir}/tmp/scgi;"
        for _ in range(3):
            self.json_port, self.html_port, self.proxy_port = free_port(), free_port(), free_port()
            conf = self.dir / "nginx.conf"
            conf.write_text(NGINX_CONF.format(d=self.dir, root=self.root, extra_temp=extra,
                                              json_port=self.json_port, html_port=self.html_port,
                                              proxy_port=self.proxy_port, s3_port=self.s3_port))
            out = open(self.dir / "stderr.log", "ab")
            self.proc = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(self.dir)],
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                         start_new_session=True)
            out.close()
            STATE.add_proc(self.proc)
            try:
                wait_until(lambda: self.proc.poll() is not None or all(
                    port_open(p) for p in (self.json_port, self.html_port, self.proxy_port)),
                    20, "nginx")
                if self.proc.poll() is None:
                    return self
            except TimeoutError:
                pass
            stop_proc(self.proc)
        logs = [self.dir / n for n in ("error.log", "stderr.log") if (self.dir / n).exists()]
        raise RuntimeError("nginx did not start: " + "".join(
            p.read_text(errors="replace")[-2000:] for p in logs))

    @property
    def log_path(self):
        return self.dir / "access.log"

    def mark(self):
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def requests(self, since=0):
        """[(start, end, port, status, bytes, method, uri, range)] logged after @since."""
        out = []
        with open(self.log_path, "rb") as f:
            f.seek(since)
            raw = f.read().decode("utf-8", "replace")
        for line in raw.splitlines():
            m = re.match(r'^(\S+) (\S+) (\d+) (\d+) (\d+) "([^"]*)" "([^"]*)" "([^"]*)"$', line)
            if not m:
                continue
            end, rt = float(m.group(1)), float(m.group(2))
            out.append((end - rt, end, int(m.group(3)), int(m.group(4)), int(m.group(5)),
                        m.group(6), m.group(7), m.group(8)))
        return out

    def bytes_for(self, since, uri_pred, port=None):
        return sum(r[4] for r in self.requests(since)
                   if r[5] == "GET" and uri_pred(r[6]) and (port is None or r[2] == port))


class S3rver:
    def __init__(self, d):
        self.dir = Path(d)

    def start(self):
        js = REPO / "tests/integration/node_modules/s3rver/bin/s3rver.js"
        if not js.exists():
            raise RuntimeError(f"{js} is missing: run scripts/bootstrap")
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            self.port = free_port()
            out = open(self.dir / "s3rver.log", "ab")
            self.proc = subprocess.Popen(
                [shutil.which("node") or "node", "--openssl-legacy-provider", str(js),
                 "--address", "127.0.0.1", "--port", str(self.port), "--directory", str(data),
                 "--silent"], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True)
            out.close()
            STATE.add_proc(self.proc)
            try:
                wait_until(lambda: self.proc.poll() is not None or port_open(self.port), 30,
                           "s3rver")
                if self.proc.poll() is None:
                    return self
            except TimeoutError:
                pass
            stop_proc(self.proc)
        raise RuntimeError("s3rver did not start: " + (self.dir / "s3rver.log").read_text()[-2000:])

    def upload(self, bucket, key, path):
        import botocore.session
        from botocore.config import Config

        c = botocore.session.get_session().create_client(
            "s3", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{self.port}",
            aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
            config=Config(s3={"addressing_style": "path"}, proxies={}))
        try:
            c.create_bucket(Bucket=bucket)
        except c.exceptions.BucketAlreadyOwnedByYou:
            pass
        with open(path, "rb") as f:
            c.put_object(Bucket=bucket, Key=key, Body=f)
        return c.head_object(Bucket=bucket, Key=key)["ContentLength"]


# ------------------------------------------------------------------------------------------
# filesystems under test


class Mount:
    """A FUSE mount we started in the foreground (so its pid is ours)."""

    kind = "?"
    cache_bytes = None  # configured cache memory, tierfs only

    def __init__(self, name, mnt, cmd, env=None, log_path=None):
        self.name, self.mnt, self.cmd, self.env = name, Path(mnt), cmd, env
        self.log_path = log_path
        self.proc = None

    def start(self, timeout=60):
        self.mnt.mkdir(parents=True, exist_ok=True)
        if is_mounted(self.mnt):
            raise RuntimeError(f"{self.mnt} is already mounted")
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                     env=self.env, start_new_session=True)
        if out is not subprocess.DEVNULL:
            out.close()
        STATE.add_proc(self.proc)
        STATE.add_mount(self.mnt)
        try:
            wait_until(lambda: self.proc.poll() is not None or is_mounted(self.mnt), timeout,
                       f"{self.name} to mount")
        except TimeoutError:
            self.stop()
            raise
        if self.proc.poll() is not None:
            STATE.drop_mount(self.mnt)
            tail = Path(self.log_path).read_text(errors="replace")[-1500:] if self.log_path else ""
            raise RuntimeError(f"{self.name} exited ({self.proc.returncode}) before mounting: {tail}")
        self.mount_seconds = time.monotonic() - t0
        return self

    def path(self, rel):
        return self.mnt / rel

    def hwm(self):
        return vm_hwm(self.proc.pid) if self.proc else None

    def stop(self):
        unmount(self.mnt, self.proc)


class Tierfs(Mount):
    kind = "tierfs"

    def __init__(self, name, mnt, url, opts, log_path, env=None):
        self.opts = dict(opts)
        o = ",".join(k if v is None else f"{k}={v}" for k, v in self.opts.items())
        super().__init__(name, mnt, [str(TIERFS), url, str(mnt), "-f", "-o", o],
                         env=env, log_path=log_path)
        hot = parse_size(self.opts.get("hot_size", "1G"))
        lag = 0 if self.opts.get("lagging") == "off" else parse_size(
            self.opts.get("lagging_size", "128M"))
        self.cache_bytes = hot + lag
        if any(k in self.opts for k in ("allow_write", "allow_overwrite", "allow_delete")):
            # a writable mount also holds its write buffers (tierfs_memory_bound_bytes)
            self.cache_bytes += parse_size(self.opts.get("write_buffer", "64M"))

    def stats(self):
        out = {}
        text = (self.mnt / ".tierfs" / "stats").read_text()
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
        return out


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMGT]?)", str(s))
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30,
                              "T": 1 << 40}[m.group(2)]


def stat_delta(a, b, key):
    return b.get(key, 0) - a.get(key, 0)


# ------------------------------------------------------------------------------------------
# the bench


class RedisKeyEvents:
    """Redis's key events during a fleet run (scenario 12), to tell where an extra fetch
    came from: a value of the run (a "tierfs:" key) that allkeys-lru evicted, or a fetch lock
    that expired while its block had no value yet (its holder's SET was still queued or
    lost; a lock taken on a GET that found the value also expires, with the value there)."""

    def __init__(self, port, prefix="tierfs:"):
        import socket
        import threading
        self.prefix = prefix.encode()
        self.evicted, self.expired, self.expired_no_value = 0, 0, 0
        self.ask = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.askf = self.ask.makefile("rb")
        self.call(b"CONFIG", b"SET", b"notify-keyspace-events", b"Exe")
        self.sub = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.subf = self.sub.makefile("rb")
        self.sub.sendall(self.resp(b"SUBSCRIBE", b"__keyevent@0__:evicted",
                                   b"__keyevent@0__:expired"))
        for _ in range(2):
            self.reply(self.subf)  # the subscriptions' confirmations
        self.sub.settimeout(None)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    @staticmethod
    def resp(*args):
        return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a)
                                                 for a in args)

    @staticmethod
    def reply(f):
        line = f.readline()
        if not line:
            raise EOFError
        kind, rest = line[:1], line[1:-2]
        if kind == b"*":
            return [RedisKeyEvents.reply(f) for _ in range(int(rest))]
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else f.read(n + 2)[:-2]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        return int(rest) if kind == b":" else rest

    def call(self, *args):
        self.ask.sendall(self.resp(*args))
        return self.reply(self.askf)

    def run(self):
        lock = self.prefix + b"lock:"
        try:
            while True:
                _, chan, key = self.reply(self.subf)
                if chan.endswith(b"evicted") and key.startswith(self.prefix):
                    self.evicted += 1
                elif chan.endswith(b"expired") and key.startswith(lock):
                    self.expired += 1
                    if not self.call(b"EXISTS", self.prefix + key[len(lock):]):
                        self.expired_no_value += 1
        except (EOFError, OSError, ValueError):
            pass

    def stop(self):
        """@return the counts; closes the connections."""
        import socket
        for s in (self.sub, self.ask):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(10)
        self.sub.close()
        self.ask.close()
        return {"evicted_values": self.evicted, "expired_locks": self.expired,
                "expired_locks_without_value": self.expired_no_value}


class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        q = self.quick
        self.p = {
            "seq_size": 256 * MiB if q else GiB,
            "runs": args.runs or (3 if q else 5),
            "rand_seconds": 2 if q else 5,  # per system and run, in 0.5 s slices
            "cached_passes": 2 if q else 3,  # cached re-reads per system and run
            # seconds before each cold read of scenario 1: this VM's host takes back guest
            # memory freed a few seconds earlier, so without a pause a system read just after
            # another was unmounted (the prefault mounts free 640 MiB) gets memory still backed
            # and one read after a system that kept its memory gets none: the order decided
            "cold_settle": 4,
            "multi_runs": 2 if q else 3,
            "hot_files": 4,
            "hot_file_size": 32 * MiB if q else 64 * MiB,
            "old_files": 4 if q else 10,
            "old_file_size": 256 * MiB,
            "lagrand_rate": "50M",  # scenario 11: tierfs's default lagging_rate
            "lagrand_seconds": 15,
            "iso_hot_size": 192 * MiB if q else 384 * MiB,
            "iso_lagging_size": 32 * MiB,  # the smallest lagging tier (8 blocks of 4M)
            "iso_rate": "100M",
            "iso_slice": 1,  # seconds of tail reads per slice
            "iso_pairs": 15,  # alone / with replay slice pairs (5 left the quick figure at 0.99-1.59 per pair)
            "rate_seconds": 6 if q else 20,
            "rate_runs": 1 if q else 2,
            "rates": ["20M", "100M"],
            "broker_live": 10 if q else 30,  # segments uploaded while the consumers run
            "broker_old": 4 if q else 8,  # old segments for the lagging consumer
            "broker_interval": 3.0,
            "meta_uploads": 15 if q else 50,  # 10: new objects, each read by name
            "meta_upload_size": 64 * 1024,
            "meta_poll": 0.01,  # seconds between a reader's attempts
            "meta_first_byte_deadline": 30,
            "meta_keys": 20000 if q else 100000,  # 10: ls -l of one prefix
            "meta_ls_runs": 1 if q else 3,
            "meta_ls_timeout": 300,
            "meta_hang_ops": 200,  # 10: stats and cached reads during a hung store
            "meta_hang_timeout": 10,
            "meta_hang_stale_ops": 100,  # 10c stale: rounds of stat, ls, cat stats, open+read
            "meta_hang_stale_seconds": 3.0,  # ... spread over this much of the hang at least
            # the parts of scenario 10 to run, e.g. --set meta_parts=hang,hang_stale
            "meta_parts": "first_byte,ls,hang,hang_stale",
            "disk_runs": 3 if q else 5,  # disk hit / local file pairs
            "disk_recover_size": 2 * GiB if q else 10 * GiB,  # records filled for recovery
            "disk_recover_runs": 3,
            "shared_runs": 1 if q else 3,
            "shared_timeout": "",  # "": tierfs's default
            "shared_pace": "64M",  # 12b: each paced reader's bytes a second ("": no 12b)
            # the rows of scenarios 12-13 to run: "alone" and "shared" (1, 2 and 3 mounts at full
            # speed), "paced" (12b), "budget" (13); e.g. --set shared_rows=paced
            "shared_rows": "alone,shared,paced,budget",
            "shared_opts": "",  # more mount options for scenario 12's mounts, e.g. prefault=on
            # a command redis-server runs under, e.g. "chrt -f 1": Redis as on its own host,
            # served as soon as it can run (an experiment; "": as any other process)
            "redis_wrap": "",
            "fleet_rate": "30M",
            "fleet_seconds": 6 if q else 15,
            "mac_rounds": 5 if q else 9,  # 12c: rounds of (plain, keyed) shared-hit reads
            "trace_runs": 5 if q else 9,  # trace: interleaved on/off pairs
            "trace_rand_seconds": 1.0,  # trace: each random-read pass
            "sim_mounts": 100,  # sim: brokers of the fleet replayed together
            "sim_duration": "1h",  # sim: their trace's span
            # scenario write (issue 29): the size of every written file (seq.bin's bytes),
            # interleaved runs of W1, seconds of quiet before each timed write (the previous
            # one's memory given back), the parts to run
            "write_runs": 2 if q else 3,
            "write_settle": 2,
            "write_rows": "seq,readback,rss",
        }
        for kv in args.set:
            k, v = kv.split("=", 1)
            if k not in self.p:
                raise SystemExit(f"--set: no parameter {k} (have: {', '.join(self.p)})")
            self.p[k] = type(self.p[k])(json.loads(v) if not isinstance(self.p[k], str) else v)
        self.peers = args.peers if args.peers is not None else not q
        self.work = Path(args.work)
        self.out = Path(args.out)
        self.raw = {"params": self.p, "peers": self.peers, "runs": {}}
        self.notes = []

    # -- setup ----------------------------------------------------------------------------

    def setup(self):
        self.work.mkdir(parents=True, exist_ok=True)
        self.data = self.work / ("data-quick" if self.quick else "data-full")
        self.run_dir = Path(os.environ.get("BENCH_RUN_DIR") or
                            (self.work / f"run-{os.getpid()}"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        STATE.file = self.run_dir / "state"
        STATE.save()
        t0 = time.monotonic()
        self.files = make_dataset(self.data, self.p)
        self.s3 = S3rver(self.run_dir / "s3rver").start()
        self.nginx = Nginx(self.run_dir / "nginx", self.data, self.s3.port).start()
        log(f"nginx on 127.0.0.1:{self.nginx.json_port} (json) {self.nginx.html_port} (html) "
            f"{self.nginx.proxy_port} (s3 proxy); s3rver on 127.0.0.1:{self.s3.port}")
        self.bucket = "bench"
        self.s3.upload(self.bucket, "seq.bin", self.data / "seq.bin")
        warm([self.data / r for r in self.files])
        self.http_url = f"http://127.0.0.1:{self.nginx.json_port}/"
        self.html_url = f"http://127.0.0.1:{self.nginx.html_port}/"
        self.s3_endpoint = f"http://127.0.0.1:{self.nginx.proxy_port}"
        self.s3_env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")
        for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy",
                  "ALL_PROXY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
            self.s3_env.pop(k, None)
        pw = self.run_dir / "s3fs.passwd"
        pw.write_text("S3RVER:S3RVER\n")
        pw.chmod(0o600)
        self.s3fs_passwd = pw
        self.mnt_n = 0
        self.hwm = []  # (system, VmHWM, configured cache bytes, opts)
        log(f"setup took {time.monotonic() - t0:.1f}s")

    def rewarm(self, rels):
        """Read the sources of @rels (and s3rver's copies) again: drop_caches in a cached
        scenario drops the servers' pages too, and cold reads are measured from warm
        servers."""
        warm([self.data / r for r in rels])
        warm([f for f in (self.s3.dir / "data").rglob("*") if f.is_file()
              and any(f.name.startswith(Path(r).name) for r in rels)])

    def mnt(self, name):
        self.mnt_n += 1
        return self.run_dir / "mnt" / f"{name}-{self.mnt_n}"

    def fresh_cache_dir(self, name):
        d = self.run_dir / "cache" / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        return d

    # -- systems ---------------------------------------------------------------------------

    def seq_opts(self):
        hot = 512 * MiB if self.quick else 2 * GiB
        return {"hot_size": size_opt(hot), "hot_ttl": "100000000"}

    def new_mount(self, system, opts=None):
        """A fresh, cold mount of @system; its seq object is m.path(m.seq)."""
        name = system
        logp = self.run_dir / f"{system}.log"
        if system in ("tierfs", "tierfs-pf"):
            o = opts or dict(self.seq_opts(), **({"prefault": "on"} if system == "tierfs-pf" else {}))
            m = Tierfs(system, self.mnt(name), self.http_url, o, logp)
        elif system in ("tierfs-s3", "tierfs-s3-pf"):
            o = dict(self.seq_opts(), endpoint=self.s3_endpoint, path_style=None,
                     region="us-east-1", **({"prefault": "on"} if system.endswith("-pf") else {}))
            m = Tierfs(system, self.mnt(name), f"s3://{self.bucket}", o, logp,
                       env=self.s3_env)
        elif system == "nullfs":
            mp = self.mnt(name)
            m = Mount("nullfs", mp, [str(NULLFS), str(mp), f"seq.bin={self.p['seq_size']}",
                                     "-f"], log_path=logp)
        elif system == "s3fs":
            cache = self.fresh_cache_dir("s3fs")
            mp = self.mnt(name)
            m = Mount("s3fs", mp, [
                "s3fs", self.bucket, str(mp), "-f", "-o",
                f"url={self.s3_endpoint},use_path_request_style,passwd_file={self.s3fs_passwd},"
                f"use_cache={cache},ro,endpoint=us-east-1,dbglevel=warn"],
                env=self.s3_env, log_path=logp)
        elif system == "rclone":
            cache = self.fresh_cache_dir("rclone")
            mp = self.mnt(name)
            m = Mount("rclone", mp, [
                "rclone", "mount", ":http:", str(mp), "--http-url", self.html_url,
                "--vfs-cache-mode", "full", "--cache-dir", str(cache), "--read-only",
                "--config", str(self.run_dir / "rclone.conf"), "--log-level", "ERROR"],
                log_path=logp)
        elif system == "httpdirfs":
            cache = self.fresh_cache_dir("httpdirfs")
            mp = self.mnt(name)
            m = Mount("httpdirfs", mp, [
                "httpdirfs", "-f", "--cache", "--cache-location", str(cache), "--no-range-check",
                self.html_url,
                str(mp)], log_path=logp)
        else:
            raise ValueError(system)
        m.start()
        # first lookup of the object (namespace listing, HEAD) is not part of the read
        try:
            wait_until(lambda: m.path("seq.bin").exists(), 30, f"{system} to list seq.bin")
            # and one open (httpdirfs sets up its cache file at the first open, and concurrent
            # first opens race in it: ENOENT)
            os.close(os.open(m.path("seq.bin"), os.O_RDONLY))
        except BaseException:
            self.close_mount(m, "failed")
            raise
        return m

    def peer_failed(self, s, scen, e):
        """A peer that fails is noted and left out of that run; tierfs failing stops the bench."""
        if s.startswith("tierfs"):
            raise e
        msg = f"{s} failed in {scen}: {str(e)[-300:]}"
        log(msg)
        self.notes.append(msg)

    def close_mount(self, m, note=""):
        h = m.hwm()
        if h and isinstance(m, Tierfs):
            try:
                st = m.stats()
                keep = {k: v for k, v in st.items()
                        if re.match(r"tierfs_cache_(bounces|evictions|fetches|misses|hits)_total"
                                    r"|tierfs_backend_(requests|received_bytes)_total", k)}
            except OSError:
                keep = {}
            self.hwm.append({"system": m.name, "vm_hwm": h, "cache_bytes": m.cache_bytes,
                             "opts": m.opts, "note": note, "stats": keep})
        elif h:
            self.hwm.append({"system": m.name, "vm_hwm": h, "cache_bytes": None, "note": note})
        m.stop()

    # -- scenarios 1-3 ----------------------------------------------------------------------

    def scen_seq(self):
        """1-3. Per run: every system gets a fresh mount and a cold read, one after the other
        (the order rotates from run to run); then, with all of them still mounted, the cached
        re-reads and the 4 KiB random reads go round the systems in short slices (A B C A B C
        ...), so that the noise of a shared machine falls on all of them alike."""
        # touch: the rate at which a process gets new memory right then (preader touch), which
        # bounds a cold read into a tier whose memory is still untouched; tierfs-pf and
        # tierfs-s3-pf: tierfs with prefault=on, its memory taken at mount, cold read only
        systems = ["tierfs", "nullfs", "curl", "tierfs-s3", "curl-s3", "touch", "tierfs-pf",
                   "tierfs-s3-pf"]
        if self.peers:
            systems += ["s3fs", "rclone", "httpdirfs"]
        runs = self.p["runs"]
        res = {s: {"cold": [None] * runs, "cached": [None] * runs, "rand": [None] * runs}
               for s in systems}
        size = self.p["seq_size"]
        slice_s = 0.5
        nslices = max(1, int(round(self.p["rand_seconds"] / slice_s)))
        for run_i in range(runs):
            order = systems[run_i % len(systems):] + systems[:run_i % len(systems)]
            mounts = {}
            self.rewarm(["seq.bin"])  # the previous run dropped the servers' pages too
            try:
                for s in order:
                    time.sleep(self.p["cold_settle"])
                    if s.startswith("curl"):
                        url = (self.http_url + "seq.bin" if s == "curl"
                               else f"{self.s3_endpoint}/{self.bucket}/seq.bin")
                        r = run(["curl", "-sS", "--noproxy", "*", "-o", "/dev/null", "-w",
                                 "%{size_download} %{time_total}", url], timeout=600)
                        n, t = r.stdout.split()
                        if int(n) != size:
                            raise RuntimeError(f"curl got {n} bytes of {size}")
                        res[s]["cold"][run_i] = size / float(t) / 1e6
                        log(f"run {run_i + 1} {s}: cold {res[s]['cold'][run_i]:.0f} MB/s")
                        continue
                    if s == "touch":
                        res[s]["cold"][run_i] = preader(["touch", size])["mbps"]
                        log(f"run {run_i + 1} {s}: new memory {res[s]['cold'][run_i]:.0f} MB/s")
                        continue
                    try:
                        m = self.new_mount(s)
                        mounts[s] = m
                        st0 = m.stats() if isinstance(m, Tierfs) else None
                        cold = preader(["seq", m.path("seq.bin")])
                        if cold["bytes"] != size:
                            raise RuntimeError(f"cold read {cold['bytes']} of {size} bytes")
                        m.st = (st0, m.stats() if st0 is not None else None)
                    except Exception as e:
                        if s in mounts:
                            self.close_mount(mounts.pop(s), "failed")
                        self.peer_failed(s, f"scenario 1 run {run_i + 1}", e)
                        continue
                    res[s]["cold"][run_i] = cold["mbps"]
                    log(f"run {run_i + 1} {s}: cold {cold['mbps']:.0f} MB/s")
                    if s.endswith("-pf"):
                        self.close_mount(mounts.pop(s), "scenario 1")
                # 2: cached re-reads, round-robin, every kernel cache dropped before each
                cached = {s: [] for s in mounts}
                invalid = {s: [] for s in mounts}
                for _ in range(self.p["cached_passes"]):
                    for s, m in list(mounts.items()):
                        try:
                            drop_caches()
                            sa = m.stats() if isinstance(m, Tierfs) else None
                            c = preader(["seq", m.path("seq.bin")])
                            if c["bytes"] != size:
                                raise RuntimeError(f"cached read {c['bytes']} of {size} bytes")
                            why = served_check(sa, m.stats(), size) if sa else None
                            if why:
                                invalid[s].append(f"2: {why}")
                                log(f"run {run_i + 1} {s}: cached pass INVALID: {why}")
                            else:
                                cached[s].append(c)
                        except Exception as e:
                            self.close_mount(mounts.pop(s), "failed")
                            self.peer_failed(s, f"scenario 2 run {run_i + 1}", e)
                # 2b: the old fadvise(DONTNEED) variant, right after a read left the pages in
                fadv = {s: [] for s in mounts}
                for s, m in list(mounts.items()):
                    try:
                        c = preader(["seq", "--dontneed", m.path("seq.bin")])
                        if c["bytes"] != size:
                            raise RuntimeError(f"fadvise read {c['bytes']} of {size} bytes")
                        fadv[s].append(c)
                    except Exception as e:
                        self.close_mount(mounts.pop(s), "failed")
                        self.peer_failed(s, f"scenario 2b run {run_i + 1}", e)
                st2 = {s: m.stats() for s, m in mounts.items() if isinstance(m, Tierfs)}
                # 3: random 4 KiB O_DIRECT reads, round-robin slices, caches dropped before each
                rnd = {s: [] for s in mounts}
                for k in range(nslices):
                    for s, m in list(mounts.items()):
                        try:
                            drop_caches()
                            sa = m.stats() if isinstance(m, Tierfs) else None
                            rr = preader(["rand", "--direct", "--duration", slice_s,
                                          "--seed", run_i * 1000 + k + 1, m.path("seq.bin")])
                            why = served_check(sa, m.stats(), rr["ops"] * 4096) if sa else None
                            if why:
                                invalid[s].append(f"3: {why}")
                                log(f"run {run_i + 1} {s}: random slice INVALID: {why}")
                            rnd[s].append(rr)
                        except Exception as e:
                            self.close_mount(mounts.pop(s), "failed")
                            self.peer_failed(s, f"scenario 3 run {run_i + 1}", e)
                for s, m in mounts.items():
                    res[s].setdefault("invalid", [None] * runs)[run_i] = invalid[s] or None
                    bad2 = any(w.startswith("2:") for w in invalid[s])
                    bad3 = any(w.startswith("3:") for w in invalid[s])
                    if cached[s] and not bad2:
                        b = sum(c["bytes"] for c in cached[s])
                        res[s]["cached"][run_i] = b / sum(c["seconds"] for c in cached[s]) / 1e6
                    if fadv[s]:
                        res[s].setdefault("fadvise", [None] * runs)[run_i] = \
                            fadv[s][0]["bytes"] / fadv[s][0]["seconds"] / 1e6
                    if rnd[s] and not bad3:
                        ops = sum(r["ops"] for r in rnd[s])
                        res[s]["rand"][run_i] = {
                            "iops": ops / sum(r["seconds"] for r in rnd[s]),
                            "lat_us": {q: statistics.median(r["lat_us"][q] for r in rnd[s])
                                       for q in ("p50", "p99", "p999")},
                            "slices": len(rnd[s])}
                    if isinstance(m, Tierfs):
                        st0, st1 = m.st
                        st3 = m.stats()
                        fk = 'tierfs_cache_fetched_bytes_total{tier="hot"}'
                        rk = 'tierfs_read_bytes_total'
                        res[s].setdefault("check", []).append({
                            "cold_fetched": stat_delta(st0, st1, fk),
                            "cached_fetched": stat_delta(st1, st2[s], fk),
                            "cached_served": stat_delta(st1, st2[s], rk),
                            "rand_fetched": stat_delta(st2[s], st3, fk),
                            "rand_served": stat_delta(st2[s], st3, rk)})
                    rr = res[s]["rand"][run_i]
                    log(f"run {run_i + 1} {s}: cached "
                        f"{fmt_num(res[s]['cached'][run_i])} MB/s"
                        f"{' (INVALID run)' if bad2 else ''}, fadvise variant "
                        f"{fmt_num((res[s].get('fadvise') or [None] * runs)[run_i])} MB/s, "
                        f"rand {'(INVALID run) ' if bad3 else ''}"
                        + (f"{rr['iops']:.0f} IOPS p50 {rr['lat_us']['p50']:.0f}us p99 "
                           f"{rr['lat_us']['p99']:.0f}us" if rr else "n/a"))
            finally:
                for s, m in mounts.items():
                    self.close_mount(m, "scenarios 1-3")
        self.raw["runs"]["seq"] = res
        return res

    # -- scenario 4 -------------------------------------------------------------------------

    def scen_multi(self):
        systems = ["tierfs", "nullfs"] + (["s3fs", "rclone", "httpdirfs"] if self.peers else [])
        res = {s: [] for s in systems}
        size = self.p["seq_size"]
        self.rewarm(["seq.bin"])
        for run_i in range(self.p["multi_runs"]):
            for s in systems:
                try:
                    m = self.new_mount(s)
                    try:
                        mark = self.nginx.mark()
                        st0 = m.stats() if isinstance(m, Tierfs) else None
                        r = preader(["multi", "--threads", 16, m.path("seq.bin")])
                        st1 = m.stats() if isinstance(m, Tierfs) else None
                    finally:
                        self.close_mount(m, "scenario 4")
                    if r["bytes"] != 16 * size:
                        raise RuntimeError(f"{s}: 16 readers read {r['bytes']} of {16 * size}")
                except Exception as e:
                    self.peer_failed(s, f"scenario 4 run {run_i + 1}", e)
                    continue
                time.sleep(0.3)  # nginx logs a request when it ends; the unmount ended them
                if s == "nullfs":
                    fetched = None
                else:
                    fetched = self.nginx.bytes_for(mark, lambda u: u.endswith("/seq.bin"))
                e = {"mbps": r["mbps"], "seconds": r["seconds"],
                     "fetched": fetched, "ratio": fetched / size if fetched is not None else None}
                if st0 is not None:
                    e["stats_received"] = stat_delta(st0, st1,
                                                     "tierfs_backend_received_bytes_total")
                    e["stats_joins"] = stat_delta(
                        st0, st1, 'tierfs_cache_singleflight_joins_total{tier="hot"}')
                res[s].append(e)
                log(f"run {run_i + 1} {s}: 16 readers {r['mbps']:.0f} MB/s aggregate, "
                    f"server bytes / object = "
                    f"{'n/a' if fetched is None else f'{fetched / size:.3f}'}")
        self.raw["runs"]["multi"] = res
        return res

    # -- scenario 8 -------------------------------------------------------------------------

    def scen_memory(self):
        """64 threads read 64 different cold objects at once; the mount's VmHWM."""
        import threading
        n, bs, hot = 64, 4 * MiB, 32 * MiB
        d = self.data / "mem"
        d.mkdir(exist_ok=True)
        size = 2 * bs + bs // 2 + 4113
        for i in range(n):  # sparse: 4 KiB of data at every MiB
            f = d / f"m-{i:02d}.bin"
            if not f.exists() or f.stat().st_size != size:
                with open(f, "wb") as w:
                    w.truncate(size)
                    for off in range(0, size, MiB):
                        w.seek(off)
                        w.write(os.urandom(4096))
        opts = {"block_size": "4M", "hot_size": size_opt(hot), "lagging": "off",
                "max_conns": str(n), "hot_ttl": "100000000"}
        m = Tierfs("tierfs", self.mnt("tierfs-mem"), self.http_url, opts,
                   self.run_dir / "tierfs-mem.log").start()
        got, errs = [0] * n, []

        def rd(i):
            try:
                with open(m.path(f"mem/m-{i:02d}.bin"), "rb", buffering=0) as f:
                    while b := f.read(MiB):
                        got[i] += len(b)
            except OSError as e:
                errs.append(e)

        try:
            t0 = time.monotonic()
            ts = [threading.Thread(target=rd, args=(i,), daemon=True) for i in range(n)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(timeout=300)
            secs = time.monotonic() - t0
            h = m.hwm()
        finally:
            self.close_mount(m, "scenario 8")
        if errs or sum(got) != n * size:
            raise RuntimeError(f"64 cold readers read {sum(got)} of {n * size} bytes: {errs[:3]}")
        res = {"vm_hwm": h, "bound": hot + 64 * MiB, "seconds": secs, "bytes": sum(got)}
        log(f"64 cold readers: VmHWM {h / MiB:.0f} MiB (bound {res['bound'] / MiB:.0f} MiB), "
            f"{sum(got) / secs / 1e6:.0f} MB/s")
        self.raw["runs"]["memory"] = res
        return res

    # -- scenario 5 -------------------------------------------------------------------------

    def scen_isolation(self):
        p = self.p
        opts = {"hot_size": size_opt(p["iso_hot_size"]), "hot_ttl": "3600",
                "lagging_size": size_opt(p["iso_lagging_size"]), "lagging_rate": p["iso_rate"]}
        self.rewarm([r for r in self.files if r.startswith(("hot/", "old/"))])
        m = Tierfs("tierfs", self.mnt("tierfs-iso"), self.http_url, opts,
                   self.run_dir / "tierfs-iso.log").start()
        hot = [m.path(r) for r in self.files if r.startswith("hot/")]
        old = [m.path(r) for r in self.files if r.startswith("old/")]
        res = {"alone": [], "replay": [], "hit_ratio": [], "hot_misses": [], "opts": opts}
        try:
            wait_until(lambda: all(f.exists() for f in hot + old), 30, "the data set to list")
            # the working set into the hot tier
            preader(["seq", "--direct"] + hot)
            # The replay runs throughout; it pauses (a pause file: its readers wait before their
            # next read) for every "alone" slice and goes on for every "with replay" slice:
            # A B A B ... a second each, so both see the same noise from the rest of the machine.
            pause = self.run_dir / "replay.pause"
            pause.unlink(missing_ok=True)
            rep = subprocess.Popen(
                [str(PREADER), "seq", "--threads", "2", "--loop", "--duration", "3600",
                 "--pause-file", str(pause)]
                + [str(x) for x in old], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, start_new_session=True)
            STATE.add_proc(rep)
            lag_key = 'tierfs_cache_fetched_bytes_total{tier="lagging"}'
            hits = miss = lag = 0
            st_start = m.stats()
            try:
                for i in range(p["iso_pairs"]):
                    pause.touch()
                    time.sleep(0.3)  # reads and fetches already started finish
                    a = preader(["rand", "--direct", "--duration", p["iso_slice"]] + hot)
                    pause.unlink()
                    time.sleep(0.3)  # the replay under way again
                    st0 = m.stats()
                    w = preader(["rand", "--direct", "--duration", p["iso_slice"]] + hot)
                    st1 = m.stats()
                    if rep.poll() is not None:
                        raise RuntimeError(f"replay ended: {rep.stderr.read()[-500:]}")
                    res["alone"].append(a)
                    res["replay"].append(w)
                    h = stat_delta(st0, st1, 'tierfs_cache_hits_total{tier="hot"}')
                    mi = stat_delta(st0, st1, 'tierfs_cache_misses_total{tier="hot"}')
                    hits, miss = hits + h, miss + mi
                    lag += stat_delta(st0, st1, lag_key)
                    res["hit_ratio"].append(h / (h + mi) if h + mi else None)
                    res["hot_misses"].append(mi)
            finally:
                pause.unlink(missing_ok=True)
                stop_proc(rep)
            st_end = m.stats()
            res["machine"] = self.iso_machine_floor(hot)
            res["replay_bytes"] = {"lagging_fetched": stat_delta(st_start, st_end, lag_key),
                                   "during_with_slices": lag,
                                   "cache_bytes": m.cache_bytes}
            res["total_hit_ratio"] = hits / (hits + miss) if hits + miss else None
            a99 = [x["lat_us"]["p99"] for x in res["alone"]]
            w99 = [x["lat_us"]["p99"] for x in res["replay"]]
            log(f"isolation: {len(a99)} pairs of {p['iso_slice']} s slices: tail p50/p99 alone "
                f"{median([x['lat_us']['p50'] for x in res['alone']]):.1f}/{median(a99):.1f}us, "
                f"with replay {median([x['lat_us']['p50'] for x in res['replay']]):.1f}/"
                f"{median(w99):.1f}us, p99 ratio (median of pairs) "
                f"{median([x / y for x, y in zip(w99, a99)]):.2f}, alone/next alone "
                f"{median([y / x for x, y in zip(a99, a99[1:])] or [0]):.2f}; replay fetched "
                f"{res['replay_bytes']['lagging_fetched'] / MiB:.0f} MiB = "
                f"{res['replay_bytes']['lagging_fetched'] / m.cache_bytes:.1f}x the cache; "
                f"tail hit ratio {res['total_hit_ratio']:.4f}")
        finally:
            self.close_mount(m, "scenario 5")
        self.raw["runs"]["isolation"] = res
        return res

    def iso_machine_floor(self, hot):
        """What the replay's bytes cost the tail when tierfs does not carry them: the same
        alone/with pairs, the "with" slices beside two curl processes reading the old objects
        straight from nginx at iso_rate together (each at half; paused with SIGSTOP for the
        alone slices). The tail still reads through tierfs, so the ratio is what moving that
        many bytes over loopback costs the tail on this machine."""
        p = self.p
        urls = [self.http_url + r for r in self.files if r.startswith("old/")]
        per = parse_size(p["iso_rate"]) // 2
        total = sum(p["old_file_size"] for r in self.files if r.startswith("old/"))
        rounds = int(p["iso_pairs"] * p["iso_slice"] * per / total) + 2
        out = {"alone": [], "curl": [], "rate": p["iso_rate"]}
        kids = []
        try:
            for _ in range(2):
                k = subprocess.Popen(["curl", "-sS", "--noproxy", "*", "--limit-rate", str(per)]
                                     + [a for u in urls * rounds for a in ("-o", "/dev/null", u)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
                STATE.add_proc(k)
                kids.append(k)
            for _ in range(p["iso_pairs"]):
                for k in kids:
                    k.send_signal(signal.SIGSTOP)
                time.sleep(0.3)
                a = preader(["rand", "--direct", "--duration", p["iso_slice"]] + hot)
                for k in kids:
                    k.send_signal(signal.SIGCONT)
                time.sleep(0.3)
                w = preader(["rand", "--direct", "--duration", p["iso_slice"]] + hot)
                for k in kids:
                    if k.poll() is not None:
                        raise RuntimeError(f"curl stream ended: {k.stderr.read()[-300:]}")
                out["alone"].append(a)
                out["curl"].append(w)
        finally:
            for k in kids:
                if k.poll() is None:
                    k.send_signal(signal.SIGCONT)
                stop_proc(k)
        a99 = [x["lat_us"]["p99"] for x in out["alone"]]
        c99 = [x["lat_us"]["p99"] for x in out["curl"]]
        log(f"isolation, machine floor: tail p99 alone {median(a99):.1f}us, beside a "
            f"{p['iso_rate']}B/s curl stream {median(c99):.1f}us, ratio (median of pairs) "
            f"{median([x / y for x, y in zip(c99, a99)]):.2f}")
        return out

    # -- scenario 6 -------------------------------------------------------------------------

    def scen_rate(self):
        p = self.p
        res = {r: [] for r in p["rates"]}
        old_rel = [r for r in self.files if r.startswith("old/")]
        self.rewarm(old_rel)
        for run_i in range(p["rate_runs"]):
            for rate in p["rates"]:
                opts = {"hot_size": "256M", "lagging_rate": rate}
                m = Tierfs("tierfs", self.mnt("tierfs-rate"), self.http_url, opts,
                           self.run_dir / "tierfs-rate.log").start()
                try:
                    old = [m.path(r) for r in old_rel]
                    wait_until(lambda: all(f.exists() for f in old), 30, "old objects")
                    mark = self.nginx.mark()
                    st0 = m.stats()
                    r = preader(["seq", "--threads", 4, "--duration", p["rate_seconds"]] + old)
                    st1 = m.stats()
                finally:
                    self.close_mount(m, "scenario 6")
                time.sleep(0.3)
                reqs = [q for q in self.nginx.requests(mark)
                        if q[5] == "GET" and q[6].startswith("/old/") and q[2] == self.nginx.json_port]
                e = self.rate_estimate(reqs, parse_size(rate), p["rate_seconds"])
                e["stats_fetched"] = stat_delta(
                    st0, st1, 'tierfs_cache_fetched_bytes_total{tier="lagging"}')
                e["reader_bytes"] = r["bytes"]
                res[rate].append(e)
                log(f"rate {rate} run {run_i + 1}: measured {e['rate'] / MiB:.2f} MiB/s = "
                    f"{e['accuracy']:.3f}x (regression {e['slope'] / MiB:.2f} MiB/s)")
        self.raw["runs"]["rate"] = res
        return res

    @staticmethod
    def rate_estimate(reqs, rate, seconds):
        """Bytes at the server over time, the burst subtracted.

        The limiter lets a fetch start when the bucket holds its bytes: by the start of fetch k,
        bytes(<= k) = burst + rate * (t_k - t_0) when the reader always wants more. So the rate is
        (bytes of all fetches started up to the last one in the window - burst) / (its start -
        the first start). Also a least-squares slope of cumulative bytes over start times, past
        the burst, as a check that needs no burst figure."""
        burst = 2 * rate
        if not reqs:
            raise RuntimeError("no lagging requests at the server")
        reqs = sorted(reqs, key=lambda q: q[0])
        t0 = reqs[0][0]
        inwin = [q for q in reqs if q[0] - t0 <= seconds]
        cum, pts = 0, []
        for q in inwin:
            cum += q[4]
            pts.append((q[0] - t0, cum))
        tl, bl = pts[-1]
        est = (bl - burst) / tl if tl > 0 else 0
        post = [pt for pt in pts if pt[1] > burst]
        slope = 0.0
        if len(post) >= 3:
            mx = sum(x for x, _ in post) / len(post)
            my = sum(y for _, y in post) / len(post)
            sxx = sum((x - mx) ** 2 for x, _ in post)
            slope = sum((x - mx) * (y - my) for x, y in post) / sxx if sxx else 0.0
        return {"rate": est, "accuracy": est / rate, "slope": slope,
                "slope_accuracy": slope / rate, "requests": len(inwin), "window": tl,
                "bytes": bl, "burst": burst, "total_bytes": sum(q[4] for q in reqs)}

    # -- scenarios 12-13: the shared tier and the fleet budget -------------------------------

    FILL_IDLE = 3  # s: see redis_fill

    @staticmethod
    def redis_fill(port, maxmemory=1 << 30):
        """Fill a new redis-server past its maxmemory with 4 MiB values of other keys, so that
        it runs as a fleet's Redis runs after its first hour: full, evicting, its memory in
        use. An empty one stores every value in memory it has never touched, and on this VM
        that ingests 4 MiB SETs at about 200 MB/s (about 20 ms each) against 1.3-2 GB/s once
        it is full (redis-benchmark -t set -d 4194304): its GETs then wait behind SETs for
        tens of ms, which is the VM's page faults, not the shared tier."""
        n = maxmemory // (4 << 20) + 32
        run(["redis-benchmark", "-p", str(port), "-t", "set", "-d", str(4 << 20), "-n", str(n),
             "-r", "1000000000", "-c", "2", "-q"], timeout=300)

        # Redis's LRU clock counts whole seconds: values written in the same second or two as
        # the fill look as old as it, and allkeys-lru evicted a run's own fresh values (4-11
        # of 64 with one mount) for the fill's, which a second mount then fetched again. After an
        # hour the fill would be an hour old: wait until Redis sees it FILL_IDLE s old.
        def idle():
            key = subprocess.run(["redis-cli", "-p", str(port), "randomkey"], text=True,
                                 capture_output=True, timeout=10).stdout.strip()
            out = subprocess.run(["redis-cli", "-p", str(port), "object", "idletime", key],
                                 text=True, capture_output=True, timeout=10).stdout.strip()
            return int(out) if out.isdigit() else 0
        wait_until(lambda: idle() >= Bench.FILL_IDLE, 30, "the fill to age in Redis's LRU clock",
                   interval=0.2)

    def redis_start(self, name, fill=True, maxmemory="1gb"):
        """A redis-server as docs/caching.md says a fleet runs it (no persistence, allkeys-lru), on a
        free port, filled past its maxmemory unless not @fill; @return (process, port)."""
        d = self.run_dir / name
        d.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            port = free_port()
            out = open(d / "redis.log", "ab")
            proc = subprocess.Popen(
                self.p["redis_wrap"].split() + [
                    "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--maxmemory", str(maxmemory), "--maxmemory-policy",
                    "allkeys-lru", "--dir", str(d)], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True)
            out.close()
            STATE.add_proc(proc)
            try:
                wait_until(lambda: proc.poll() is not None or port_open(port), 20,
                           "redis-server")
                if proc.poll() is None:
                    if fill:
                        self.redis_fill(port)
                    return proc, port
            except TimeoutError:
                pass
            stop_proc(proc)
        raise RuntimeError("redis-server did not start: "
                           + (d / "redis.log").read_text(errors="replace")[-1000:])

    @staticmethod
    def stat_sum(st, name):
        return sum(v for k, v in st.items() if k.split("{")[0] == f"tierfs_{name}")

    @staticmethod
    def get_latency(sts):
        """The GET latency histogram summed over mounts' stats @sts: [(bound s, GETs
        answered within it, late answers included)], cumulative, the last bound inf."""
        pre = 'tierfs_shared_get_seconds_bucket{tier="shared",le="'
        h = {}
        for st in sts:
            for k, v in st.items():
                if k.startswith(pre):
                    le = float(k[len(pre):].split('"')[0])
                    h[le] = h.get(le, 0) + v
        return sorted(h.items())

    def fleet_mounts(self, n, opts, tag):
        ms = []
        try:
            for i in range(n):
                ms.append(Tierfs("tierfs", self.mnt(f"tierfs-{tag}{i}"), self.http_url, opts,
                                 self.run_dir / f"tierfs-{tag}{i}.log").start())
        except BaseException:
            for m in ms:
                self.close_mount(m, "failed")
            raise
        return ms

    # -- trace and sim (issue 31) ----------------------------------------------------------

    def scen_trace(self):
        """Cached reads at full speed, trace=FILE on and off: two mounts of seq.bin, warmed,
        then interleaved passes with every kernel cache dropped before each (as scenario 2),
        1 MiB sequential and 4 KiB O_DIRECT random."""
        size = self.p["seq_size"]
        tdir = self.run_dir / "trace"
        shutil.rmtree(tdir, ignore_errors=True)
        tdir.mkdir(parents=True)
        opts = {"off": self.seq_opts(), "on": dict(self.seq_opts(), trace=str(tdir / "t.trace"))}
        mounts = {k: Tierfs(f"tierfs-trace-{k}", self.mnt(f"trace-{k}"), self.http_url, o,
                            self.run_dir / f"trace-{k}.log").start() for k, o in opts.items()}
        res = {k: {"seq": [], "rand": [], "invalid": []} for k in mounts}
        try:
            for m in mounts.values():
                preader(["seq", m.path("seq.bin")])  # fills the hot tier
            for i in range(self.p["trace_runs"]):
                order = ["off", "on"] if i % 2 == 0 else ["on", "off"]
                for k in order:
                    self.trace_pass(mounts[k], res[k], size, i)
            recs = mounts["on"].stats()
        finally:
            for m in mounts.values():
                self.close_mount(m, "trace")
        ratios = {w: [a / b for a, b in zip(res["on"][w], res["off"][w]) if a and b]
                  for w in ("seq", "rand")}
        self.raw["runs"]["trace"] = {
            "res": res, "ratios": ratios,
            "records": recs.get("tierfs_trace_records_total"),
            "reads": recs.get("tierfs_reads_total"),
            "dropped": recs.get("tierfs_trace_dropped_total")}
        log(f"trace: on/off seq {ratios['seq']}, rand {ratios['rand']}; records "
            f"{recs.get('tierfs_trace_records_total')} of {recs.get('tierfs_reads_total')} "
            f"reads, dropped {recs.get('tierfs_trace_dropped_total')}")

    def trace_pass(self, m, out, size, i):
        """One sequential and one random pass of @m, kernel caches dropped, each counted only
        if tierfs served it (scenario 2's check)."""
        drop_caches()
        sa = m.stats()
        c = preader(["seq", m.path("seq.bin")])
        why = served_check(sa, m.stats(), size)
        out["seq"].append(None if why else c["mbps"])
        drop_caches()
        sa = m.stats()
        rr = preader(["rand", "--direct", "--duration", self.p["trace_rand_seconds"],
                      "--seed", i + 1, m.path("seq.bin")])
        why2 = served_check(sa, m.stats(), rr["ops"] * 4096)
        out["rand"].append(None if why2 else rr["iops"])
        for w in (why, why2):
            if w:
                out["invalid"].append(w)
                log(f"trace {m.name} pass {i + 1}: INVALID: {w}")

    def scen_sim(self):
        """tierfs-sim on one core: one broker's hour, then a fleet of sim_mounts brokers."""
        gdir = self.work / "sim-traces"
        gdir.mkdir(parents=True, exist_ok=True)
        out = {}
        for name, mounts in (("one", 1), ("fleet", self.p["sim_mounts"])):
            prefix = gdir / f"{name}-{mounts}-{self.p['sim_duration']}"
            files = [Path(f"{prefix}-{i:03d}.trace") for i in range(mounts)]
            if not all(f.exists() for f in files):
                t0 = time.monotonic()
                run([str(SIM), f"--generate={prefix}", f"--mounts={mounts}",
                     f"--duration={self.p['sim_duration']}"], timeout=1800)
                log(f"sim: generated {name} ({mounts} brokers) in "
                    f"{time.monotonic() - t0:.1f}s")
            t0 = time.monotonic()
            r = run([str(SIM), "--json", "-o", "hot_ttl=600,lagging_rate=0"] +
                    [str(f) for f in files], timeout=1800)
            wall = time.monotonic() - t0
            j = json.loads(r.stdout)
            out[name] = {"mounts": mounts, "reads": j["reads"], "cpu_s": j["cpu_s"],
                         "wall_s": wall, "reads_per_cpu_s": j["reads"] / j["cpu_s"],
                         "span_s": j["span_s"], "store_gets": j["store"]["gets"]}
            log(f"sim {name}: {j['reads']} reads of {mounts} mounts over {j['span_s']:.0f} s "
                f"replayed in {wall:.1f} s ({j['cpu_s']:.1f} s CPU, "
                f"{j['reads'] / j['cpu_s'] / 1e6:.2f}M reads/s)")
        self.raw["runs"]["sim"] = out

    def scen_shared(self):
        p = self.p
        hot = sorted(r for r in self.files if r.startswith("hot/"))
        old = sorted(r for r in self.files if r.startswith("old/"))
        total = sum(self.files[r] for r in hot)
        more = {"shared_timeout": p["shared_timeout"]} if p["shared_timeout"] else {}
        self.rewarm(hot + old[:3])
        res = {"fetch": {}, "fleet": [], "hot_bytes": total}
        # (mounts, shared, pace): full speed alone and shared, then 3 shared mounts paced
        rows = p["shared_rows"].split(",")
        configs = [(n, shared, "") for n in (1, 2, 3) for shared in (False, True)
                   if ("shared" if shared else "alone") in rows]
        if p["shared_pace"] and "paced" in rows:
            configs.append((3, True, p["shared_pace"]))
        for run_i in range(p["shared_runs"]):
            for n, shared, pace in configs:
                key = f"{n} {'shared' if shared else 'alone'}{' paced' if pace else ''}"
                proc = None
                opts = {"block_size": "4M", "hot_size": "512M", "hot_ttl": "100000000",
                        **dict(o.split("=", 1) for o in p["shared_opts"].split(",") if o)}
                if shared:
                    proc, port = self.redis_start(f"redis-{run_i}-{n}{'-paced' if pace else ''}")
                    opts.update(shared=f"redis://127.0.0.1:{port}", **more)
                ms = []
                watch = None
                try:
                    if shared:
                        watch = RedisKeyEvents(port)
                    ms = self.fleet_mounts(n, opts, "fleet")
                    for m in ms:
                        wait_until(lambda: all(m.path(r).exists() for r in hot), 30,
                                   "the new objects")
                    mark = self.nginx.mark()
                    # each mount starts at its own share, as brokers tailing different
                    # partitions of the same objects
                    cmds = [[str(PREADER), "seq"] + (["--rate", pace] if pace else []) +
                            [str(m.path(r)) for r in hot[i * len(hot) // n:] +
                             hot[:i * len(hot) // n]]
                            for i, m in enumerate(ms)]
                    rds = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True)
                           for c in cmds]
                    outs = [json.loads(r.communicate(timeout=600)[0].strip()
                                       .splitlines()[-1]) for r in rds]
                    sts = [m.stats() for m in ms]
                finally:
                    for m in ms:
                        self.close_mount(m, "scenario 12")
                    events = watch.stop() if watch else None
                    if proc:
                        stop_proc(proc)
                time.sleep(0.3)  # nginx logs a request when it ends
                at = self.nginx.bytes_for(mark, lambda u: u.startswith("/hot/"),
                                          self.nginx.json_port)
                e = {"server_per_byte": at / total,
                     "p99_ms": max(o["lat_us"]["p99"] for o in outs) / 1e3,
                     "p50_ms": statistics.median(o["lat_us"]["p50"] for o in outs) / 1e3,
                     "hits": sum(self.stat_sum(st, "shared_hits_total") for st in sts),
                     "timeouts": sum(self.stat_sum(st, "shared_timeouts_total")
                                     for st in sts),
                     "shared_stats": [{k: v for k, v in st.items() if "shared" in k}
                                      for st in sts] if shared else None,
                     "get_lat": self.get_latency(sts) if shared else None,
                     "key_events": events}
                res["fetch"].setdefault(key, []).append(e)
                log(f"shared {key} run {run_i + 1}: server bytes {e['server_per_byte']:.2f}x "
                    f"the objects, read p99 {e['p99_ms']:.1f} ms, hits {e['hits']:.0f}, "
                    f"timeouts {e['timeouts']:.0f}" + (
                        "; GETs answered within " + ", ".join(
                            f"{le * 1e3:g} ms {n:.0f}" for le, n in e["get_lat"]
                            if le in (0.01, 0.05, 0.2, 1.0, float("inf")))
                        if shared else "") + (
                        f"; Redis evicted {events['evicted_values']} of the run's values; "
                        f"{events['expired_locks']} fetch locks expired, "
                        f"{events['expired_locks_without_value']} before their value"
                        if events else ""))
            # 11: the fleet budget
            if "budget" not in rows:
                continue
            proc, port = self.redis_start(f"redis-{run_i}-rate")
            rate = parse_size(p["fleet_rate"])
            opts = {"hot_size": "256M", "lagging_rate": "0", "shared": f"redis://127.0.0.1:{port}",
                    "fleet_lagging_rate": p["fleet_rate"], **more}
            ms = []
            try:
                ms = self.fleet_mounts(3, opts, "fleet-rate")
                paths = [m.path(old[i % len(old)]) for i, m in enumerate(ms)]
                wait_until(lambda: all(x.exists() for x in paths), 30, "old objects")
                mark = self.nginx.mark()
                rds = [subprocess.Popen([str(PREADER), "seq", "--threads", "4", "--duration",
                                         str(p["fleet_seconds"]), str(x)],
                                        stdout=subprocess.PIPE, text=True) for x in paths]
                for r in rds:
                    r.communicate(timeout=p["fleet_seconds"] + 120)
                sts = [m.stats() for m in ms]
            finally:
                for m in ms:
                    self.close_mount(m, "scenario 13")
                stop_proc(proc)
            time.sleep(0.3)
            reqs = sorted((q for q in self.nginx.requests(mark) if q[5] == "GET" and
                           q[6].startswith("/old/") and q[2] == self.nginx.json_port),
                          key=lambda q: q[0])
            t0 = reqs[0][0] + 1.0
            t1 = reqs[0][0] + p["fleet_seconds"] - 0.5
            pts, cum = [], 0
            for q in reqs:
                if t0 <= q[0] <= t1:
                    cum += q[4]
                    pts.append((q[0], cum))
            mx = sum(x for x, _ in pts) / len(pts)
            my = sum(y for _, y in pts) / len(pts)
            slope = (sum((x - mx) * (y - my) for x, y in pts) /
                     sum((x - mx) ** 2 for x, _ in pts))
            e = {"rate": slope, "accuracy": slope / rate, "window": t1 - t0,
                 "calls": sum(self.stat_sum(st, "fleet_calls_total") for st in sts),
                 "grants": [self.stat_sum(st, "fleet_grants_total") for st in sts]}
            res["fleet"].append(e)
            log(f"fleet rate {p['fleet_rate']} run {run_i + 1}: {slope / MiB:.2f} MiB/s = "
                f"{e['accuracy']:.3f}x over {e['window']:.1f} s, calls {e['calls']:.0f}, "
                f"grants {e['grants']}")
        self.raw["runs"]["shared"] = res
        return res

    # -- scenario 12c: the MAC's cost on a shared hit ----------------------------------------

    def mac_prime(self, kind, hot, opts):
        """A Redis holding every block of @hot, put by a mount with @opts: (process, port)."""
        proc, port = self.redis_start(f"redis-mac-{kind}", fill=False)
        o = dict(opts, shared=f"redis://127.0.0.1:{port}")
        m = Tierfs("tierfs", self.mnt(f"tierfs-mac-prime-{kind}"), self.http_url, o,
                   self.run_dir / f"tierfs-mac-prime-{kind}.log").start()
        try:
            wait_until(lambda: all(m.path(r).exists() for r in hot), 30, "the new objects")
            run([str(PREADER), "seq"] + [str(m.path(r)) for r in hot], timeout=600)
            blocks = sum(-(-self.files[r] // (4 * MiB)) for r in hot)
            wait_until(lambda: self.stat_sum(m.stats(), "shared_puts_total") >= blocks and
                       self.stat_sum(m.stats(), "shared_put_queued_bytes") == 0, 120,
                       f"the {kind} values in Redis")
        finally:
            self.close_mount(m, "scenario 12c prime")
        return proc, port

    def mac_read(self, kind, hot, opts, port):
        """One round: a fresh mount reads @hot from Redis: {"mbps", "hits", "blocks"}."""
        o = dict(opts, shared=f"redis://127.0.0.1:{port}", prefault="on")
        m = Tierfs("tierfs", self.mnt(f"tierfs-mac-{kind}"), self.http_url, o,
                   self.run_dir / f"tierfs-mac-{kind}.log").start()
        try:
            wait_until(lambda: all(m.path(r).exists() for r in hot), 30, "the new objects")
            drop_caches()
            out = preader(["seq"] + [m.path(r) for r in hot])
            st = m.stats()
        finally:
            self.close_mount(m, "scenario 12c")
        return {"mbps": out["mbps"] * 1e6 / MiB, "hits": self.stat_sum(st, "shared_hits_total"),
                "blocks": sum(-(-self.files[r] // (4 * MiB)) for r in hot)}

    def scen_mac(self):
        """12c: see the module's docstring. A round counts only if every block was a hit."""
        hot = sorted(r for r in self.files if r.startswith("hot/"))
        total = sum(self.files[r] for r in hot)
        key = self.run_dir / "fleet.key"
        key.write_bytes(os.urandom(32))
        key.chmod(0o600)
        base = {"block_size": "4M", "hot_size": f"{total // MiB + 128}M", "lagging": "off",
                "hot_ttl": "100000000", "readahead": "4"}
        opts = {"plain": base, "keyed": dict(base, shared_key=str(key))}
        self.rewarm(hot)
        res, procs = {"plain": [], "keyed": [], "bytes": total}, []
        try:
            ports = {}
            for kind in ("plain", "keyed"):
                proc, ports[kind] = self.mac_prime(kind, hot, opts[kind])
                procs.append(proc)
            for i in range(self.p["mac_rounds"]):
                for kind in ("plain", "keyed") if i % 2 == 0 else ("keyed", "plain"):
                    e = self.mac_read(kind, hot, opts[kind], ports[kind])
                    res[kind].append(e)
                    log(f"shared hit {kind} round {i + 1}: {e['mbps']:.0f} MiB/s, "
                        f"{e['hits']:.0f} of {e['blocks']} blocks from Redis")
        finally:
            for proc in procs:
                stop_proc(proc)
        self.raw["runs"]["mac"] = res
        return res

    # -- scenario 9 -------------------------------------------------------------------------

    def scen_broker(self):
        """Producer, tail and lagging consumer (broker_sim) on one mount per backend. Bytes at
        the server for the old segments come from nginx's access log (the S3 mount goes
        through the logging proxy)."""
        p = self.p
        bp = {"live": p["broker_live"], "old": p["broker_old"], "interval": p["broker_interval"]}
        res = {}
        for backend in ("http", "s3"):
            work = self.run_dir / f"broker-{backend}"
            if backend == "http":
                d = f"broker-{os.getpid()}"  # under nginx's root (kept between runs)
                root = self.data / d
                shutil.rmtree(root, ignore_errors=True)
                store = broker_sim.DirStore(root, self.data / f".{d}-staging")
                url, opts, env = self.http_url + d + "/", {"hot_ttl": "60"}, None
                port, uri = self.nginx.json_port, f"/{d}/"
            else:
                root = None
                bucket = f"broker{os.getpid()}"
                store = broker_sim.S3Store(f"http://127.0.0.1:{self.s3.port}", bucket,
                                           work / "staging")
                # metadata_ttl: s3rver lists partial objects during a PUT (broker_sim.S3Store)
                url = f"s3://{bucket}"
                opts = {"hot_ttl": "5", "metadata_ttl": "3600", "endpoint": self.s3_endpoint,
                        "path_style": None, "region": "us-east-1"}
                env, port, uri = self.s3_env, self.nginx.proxy_port, f"/{bucket}/"
            try:
                log(f"broker {backend}: making {bp['old']} old segments")
                old = broker_sim.make_old(store, dict(broker_sim.DEFAULTS, **bp))
                m = Tierfs(f"tierfs-{backend}", self.mnt(f"tierfs-broker-{backend}"), url, opts,
                           self.run_dir / f"tierfs-broker-{backend}.log", env=env).start()
                try:
                    olds = [m.path(broker_sim.seg_name(b, "log")) for b, _ in old]
                    wait_until(lambda: all(os.getxattr(x, "user.tierfs.tier") == b"lagging"
                                           for x in olds), 60, "the old segments to be lagging")
                    names = {uri + broker_sim.seg_name(b, e) for b, _ in old
                             for e in ("log", "index", "timeindex")}
                    mark = self.nginx.mark()
                    r = broker_sim.run(m.mnt, store, old, bp, work, log=log)
                    m.st = m.stats()
                finally:
                    self.close_mount(m, "scenario 9")
                time.sleep(0.3)  # nginx logs a request when it ends; the unmount ended them
                at = self.nginx.bytes_for(mark, lambda u: u in names, port)
                r["server_bytes_old"] = at
                r["server_per_byte"] = at / r["lagging_bytes_read"] if r["lagging_bytes_read"] \
                    else None
                res[backend] = r
                log(f"broker {backend}: {broker_sim.summary(r)}; old segments' bytes at the "
                    f"server per byte read {fmt_num(r['server_per_byte'])}")
            finally:
                if root is not None:
                    shutil.rmtree(root, ignore_errors=True)
                    shutil.rmtree(store.staging, ignore_errors=True)
                shutil.rmtree(work / "staging", ignore_errors=True)
        self.raw["runs"]["broker"] = res
        return res

    # -- scenario 11 ------------------------------------------------------------------------

    def scen_lagrand(self):
        """4 KiB random O_DIRECT reads of one cold lagging object (4 threads) at the default
        lagging_rate and block_size: IOPS, latency, and the bytes fetched per read (from
        .tierfs/stats). The baseline is what fetching whole blocks allows at that rate,
        lagging_rate / block_size reads a second, which is where tierfs was before it fetched
        parts of blocks (16 IOPS measured against a ceiling of 12.5).
        11b: the same reads of the same object read as hot (lagging=off) through a 64 MiB hot
        tier (a quarter of the default old_file_size): whole blocks of an object larger than
        the tier would evict each other, so these reads fetch parts too."""
        p = self.p
        rate, bs = parse_size(p["lagrand_rate"]), 4 * MiB
        rel = [r for r in self.files if r.startswith("old/")][0]
        res = self.rand_reads("lagrand", rel, "lagging",
                              {"hot_ttl": "3600", "lagging_rate": p["lagrand_rate"]})
        res.update(whole_block_iops=rate / bs, rate=p["lagrand_rate"])
        log(f"lagging random 4K: {rand_cell(res)}, {res['fetched'] / MiB:.0f} MiB fetched in "
            f"{res['parts']:.0f} parts; whole blocks would allow {rate / bs:.1f} IOPS")
        self.raw["runs"]["lagrand"] = res  # row 11 stands if 11b fails
        h = self.rand_reads("lagrand-hot", rel, "hot", {"lagging": "off", "hot_size": "64M"})
        h.update(size=self.files[rel], hot_size=64 * MiB)
        log(f"hot random 4K, object {h['size'] / MiB:.0f} MiB through a "
            f"{h['hot_size'] / MiB:.0f} MiB hot tier: {rand_cell(h)}")
        res["hot"] = h
        return res

    def rand_reads(self, name, rel, tier, opts):
        """4 KiB random O_DIRECT reads of @rel (4 threads, lagrand_seconds) on a fresh mount
        with @opts: preader's figures and what @tier fetched meanwhile, from the stats."""
        self.rewarm([rel])
        m = Tierfs("tierfs", self.mnt("tierfs-" + name), self.http_url, opts,
                   self.run_dir / f"tierfs-{name}.log").start()
        try:
            f = m.path(rel)
            wait_until(f.exists, 30, "the data set to list")
            st0 = m.stats()
            r = preader(["rand", "--direct", "--threads", "4", "--duration",
                         str(self.p["lagrand_seconds"]), str(f)])
            st1 = m.stats()
            fetched = stat_delta(st0, st1, f'tierfs_cache_fetched_bytes_total{{tier="{tier}"}}')
            parts = stat_delta(st0, st1, f'tierfs_cache_part_fetches_total{{tier="{tier}"}}')
        finally:
            self.close_mount(m, "scenario 11")
        return {"iops": r["iops"], "ops": r["ops"], "lat_us": r["lat_us"], "fetched": fetched,
                "parts": parts, "kib_per_read": fetched / r["ops"] / 1024 if r["ops"] else None,
                "opts": opts}

    # -- scenario 10 ------------------------------------------------------------------------

    def scen_meta(self):
        """10. Metadata (issue 8): upload -> first byte by name, ls -l of many keys, lookups
        while the store hangs. Each part is its own row: one that fails is noted and the
        others still run."""
        want = set(self.p["meta_parts"].split(","))
        parts = (("first_byte", self.meta_first_byte), ("ls", self.meta_ls),
                 ("hang", self.meta_hang), ("hang_stale", self.meta_hang_stale))
        res = self.run_parts("scenario 10", [(n, fn) for n, fn in parts if n in want])
        self.raw["runs"]["meta"] = res
        return res

    def run_parts(self, what, parts):
        """Run each (name, fn) of @parts into a dict of results; a part that fails is logged,
        noted and recorded as {"error": ...}, and the others still run."""
        res = {}
        for part, fn in parts:
            try:
                res[part] = fn()
            except Exception as e:
                msg = f"{what} ({part}) failed: {str(e)[-500:]}"
                log(msg)
                self.notes.append(msg)
                res[part] = {"error": str(e)[-500:]}
        return res

    def s3_client(self):
        import botocore.session
        from botocore.config import Config

        return botocore.session.get_session().create_client(
            "s3", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{self.s3.port}",
            aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
            config=Config(s3={"addressing_style": "path"}, proxies={},
                          retries={"max_attempts": 3}, max_pool_connections=16))

    def meta_s3_mount(self, system, bucket):
        """@system on @bucket with its documented freshness options (what the row states)."""
        mp = self.mnt(f"{system}-meta")
        logp = self.run_dir / f"{system}-meta.log"
        if system == "tierfs-s3":
            o = {"endpoint": self.s3_endpoint, "path_style": None, "region": "us-east-1"}
            return Tierfs("tierfs-s3", mp, f"s3://{bucket}", o, logp, env=self.s3_env)
        if system == "s3fs":
            return Mount("s3fs", mp, [
                "s3fs", bucket, str(mp), "-f", "-o",
                f"url={self.s3_endpoint},use_path_request_style,passwd_file={self.s3fs_passwd},"
                f"ro,endpoint=us-east-1,dbglevel=warn,{META_S3FS_OPTS}"],
                env=self.s3_env, log_path=logp)
        if system == "rclone":
            # rclone's S3 client refuses to start with AWS_CA_BUNDLE set ("unsupported
            # transport"); the endpoint is plain http, so no bundle is needed
            env = {k: v for k, v in self.s3_env.items() if k != "AWS_CA_BUNDLE"}
            return Mount("rclone", mp, [
                "rclone", "mount", f":s3:{bucket}", str(mp), "--s3-provider", "Other",
                "--s3-endpoint", self.s3_endpoint, "--s3-access-key-id", "S3RVER",
                "--s3-secret-access-key", "S3RVER", "--s3-region", "us-east-1",
                "--s3-no-check-bucket", "--read-only", *META_RCLONE_OPTS.split(),
                "--config", str(self.run_dir / "rclone.conf"), "--log-level", "ERROR"],
                env=env, log_path=logp)
        raise ValueError(system)

    def meta_first_byte(self):
        """A writer PUTs new 64 KiB objects to s3rver, one at a time; for each, a reader per
        mount polls open(name) + read(1) every poll period, from a random 0-1.5 s before the
        PUT (a consumer waiting for the name, at any phase of the mounts' caches) until it gets
        the object's first byte. Time from the PUT's completion to that byte. The readers of
        all systems poll at once, so the noise falls on all of them alike."""
        import random
        import threading
        p = self.p
        n, size, period = p["meta_uploads"], p["meta_upload_size"], p["meta_poll"]
        systems = ["tierfs-s3"] + (["s3fs", "rclone"] if self.peers else [])
        bucket = f"meta{os.getpid()}"
        c = self.s3_client()
        c.create_bucket(Bucket=bucket)
        c.put_object(Bucket=bucket, Key="seed.bin", Body=b"seed")
        mounts, res = {}, {s: {"seconds": [], "polls": [], "missed": 0, "errors": []}
                           for s in systems}
        try:
            for s in systems:
                try:
                    m = mounts[s] = self.meta_s3_mount(s, bucket).start()
                    wait_until(lambda: m.path("seed.bin").exists(), 30, f"{s} to list seed.bin")
                except Exception as e:
                    if s in mounts:
                        self.close_mount(mounts.pop(s), "failed")
                    self.peer_failed(s, "scenario 10 (first byte)", e)
                    res.pop(s)
            rng = random.Random(10)
            deadline_s = p["meta_first_byte_deadline"]
            for i in range(n):
                name = f"new-{i:03d}.bin"
                body = bytes([1 + i % 250]) + os.urandom(size - 1)
                seen = {}

                def reader(s, m, stop):
                    polls, last = 0, None
                    while time.monotonic() < stop:
                        polls += 1
                        try:
                            with open(m.path(name), "rb", buffering=0) as f:
                                b = f.read(1)
                            if b == body[:1]:
                                seen[s] = (time.monotonic(), polls, None)
                                return
                            last = f"first byte {b!r}"
                        except OSError as e:
                            last = e.strerror
                        time.sleep(period)
                    seen[s] = (None, polls, last)

                stop = time.monotonic() + 1.5 + deadline_s
                ts = [threading.Thread(target=reader, args=(s, m, stop), daemon=True)
                      for s, m in mounts.items()]
                for t in ts:
                    t.start()
                time.sleep(rng.uniform(0, 1.5))
                c.put_object(Bucket=bucket, Key=name, Body=body)
                t_put = time.monotonic()
                for t in ts:
                    t.join(deadline_s + 10)
                for s in mounts:
                    t_seen, polls, last = seen.get(s, (None, 0, "reader did not end"))
                    res[s]["polls"].append(polls)
                    if t_seen is None:
                        res[s]["missed"] += 1
                        res[s]["errors"].append(f"{name}: {last}")
                    else:
                        # < 0: read before the PUT's answer reached the writer (s3rver writes
                        # in place); counted as 0
                        res[s]["seconds"].append(max(0.0, t_seen - t_put))
            for s, r in res.items():
                v = r["seconds"]
                r["p50"] = percentile(v, 50)
                r["p99"] = percentile(v, 99)
                r["uploads"] = n
                log(f"meta first byte {s}: p50 {fmt_num(r['p50'])} s, p99 {fmt_num(r['p99'])} s "
                    f"over {len(v)} of {n} uploads ({r['missed']} not seen within "
                    f"{deadline_s} s)")
        finally:
            for s, m in mounts.items():
                self.close_mount(m, "scenario 10 (first byte)")
        return {"systems": res, "poll_s": period, "size": size, "bucket": bucket,
                "deadline_s": deadline_s,
                "opts": {"tierfs-s3": "defaults (negative_ttl=1, metadata_ttl=60)",
                         "s3fs": META_S3FS_OPTS + " (noobj cache off: its default)",
                         "rclone": META_RCLONE_OPTS + " (--attr-timeout 1s: its default)"}}

    def meta_s3_put_rate(self, n=400, threads=8):
        """PUTs of empty objects per second into s3rver, @threads at once: whether a 100k-key
        prefix can be made there in reasonable time."""
        import threading
        bucket = f"putrate{os.getpid()}"
        self.s3_client().create_bucket(Bucket=bucket)

        def w(k):
            cl = self.s3_client()
            for i in range(k, n, threads):
                cl.put_object(Bucket=bucket, Key=f"p/k{i:06d}", Body=b"")

        t0 = time.monotonic()
        ts = [threading.Thread(target=w, args=(k,), daemon=True) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(300)
        return n / (time.monotonic() - t0)

    def meta_ls(self):
        """ls -l of N keys in one prefix, on the http backend (nginx over a directory of N
        1-byte files: JSON autoindex for tierfs, HTML for rclone and httpdirfs; httpdirfs
        drops empty files from its listings). Per run and
        system: drop_caches, the source directory read again (so nginx's readdir and stats
        are warm for all alike), a fresh mount of the root, then the timed `ls -l` of the
        prefix; peak RSS (VmHWM) of the filesystem's process, and its rise over the idle
        mount."""
        p = self.p
        n = p["meta_keys"]
        rel = f"meta-ls-{n}"
        d = self.data / rel
        last = d / f"key-{n - 1:06d}.bin"
        if not (last.exists() and last.stat().st_size == 1
                and sum(1 for _ in os.scandir(d)) == n):
            log(f"generating {n} files of 1 byte in {rel}/")
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            for i in range(n):
                (d / f"key-{i:06d}.bin").write_bytes(b"x")
            os.sync()  # else the first run pays the writeback of the new inodes
        rate = self.meta_s3_put_rate()
        log(f"s3rver takes {rate:.0f} PUT/s (8 threads): {n} keys would take "
            f"{n / rate / 60:.1f} min to make, so this row uses the http backend")
        systems = ["tierfs"] + (["rclone", "httpdirfs"] if self.peers else [])
        runs = p["meta_ls_runs"]
        res = {s: [] for s in systems}
        gave_up = set()
        env = dict(os.environ, LC_ALL="C")
        for run_i in range(runs):
            order = systems[run_i % len(systems):] + systems[:run_i % len(systems)]
            for s in order:
                if s in gave_up:
                    continue
                m = None
                try:
                    drop_caches()
                    for e in os.scandir(d):
                        e.stat()
                    if s == "tierfs":
                        m = Tierfs("tierfs", self.mnt("tierfs-ls"), self.http_url, {},
                                   self.run_dir / "tierfs-ls.log")
                    elif s == "rclone":
                        mp = self.mnt("rclone-ls")
                        m = Mount("rclone", mp, [
                            "rclone", "mount", ":http:", str(mp), "--http-url", self.html_url,
                            "--read-only", "--config", str(self.run_dir / "rclone.conf"),
                            "--log-level", "ERROR"], log_path=self.run_dir / "rclone-ls.log")
                    else:
                        cache = self.fresh_cache_dir("httpdirfs")
                        mp = self.mnt("httpdirfs-ls")
                        m = Mount("httpdirfs", mp, [
                            "httpdirfs", "-f", "--cache", "--cache-location", str(cache),
                            "--no-range-check", self.html_url, str(mp)],
                            log_path=self.run_dir / "httpdirfs-ls.log")
                    m.start()
                    idle = vm_hwm(m.proc.pid)
                    t0 = time.monotonic()
                    ls = subprocess.Popen(["ls", "-l", str(m.path(rel))], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, env=env,
                                          start_new_session=True)
                    try:
                        out, err = ls.communicate(timeout=p["meta_ls_timeout"])
                    except subprocess.TimeoutExpired:
                        # ls waits in the filesystem, unkillable: end the filesystem's process
                        # (ours), which fails its requests, then ls
                        stop_proc(m.proc)
                        stop_proc(ls)
                        raise
                    secs = time.monotonic() - t0
                    peak = m.hwm()
                    lines = out.count("\n")
                    if ls.returncode != 0 or lines != n + 1:
                        raise RuntimeError(f"ls -l: exit {ls.returncode}, {lines - 1} entries of "
                                           f"{n}: {err[-300:]}")
                    res[s].append({"seconds": secs, "vm_hwm": peak, "idle_hwm": idle})
                    log(f"ls -l run {run_i + 1} {s}: {secs:.2f} s, VmHWM {peak / MiB:.0f} MiB "
                        f"(+{(peak - idle) / MiB:.0f} MiB over the idle mount)")
                except Exception as e:
                    if isinstance(e, subprocess.TimeoutExpired):
                        gave_up.add(s)
                        e = RuntimeError(f"ls -l took over {p['meta_ls_timeout']} s: gave up")
                    self.peer_failed(s, f"scenario 10 (ls -l) run {run_i + 1}", e)
                    res[s].append({"error": str(e)[-300:]})
                finally:
                    if m is not None and m.proc is not None:
                        self.close_mount(m, "scenario 10 (ls -l)")
        return {"systems": res, "keys": n, "runs": runs, "s3rver_put_per_s": rate}

    def meta_hang_tree(self):
        """The store of 10c (both variants): k/ (meta_hang_ops names), u/00-u/31 with one name
        each, and a 16 MiB cached.bin. @return (its root, {rel: size}, cached.bin's bytes)."""
        root = self.data / "meta-hang"
        want = {f"k/f{i:03d}.bin": 100 for i in range(self.p["meta_hang_ops"])}
        want.update({f"u/{i:02d}/known.bin": 100 for i in range(32)})
        want["cached.bin"] = 4 * 4 * MiB  # 4 blocks of the default block_size
        for r, sz in want.items():
            f = root / r
            f.parent.mkdir(parents=True, exist_ok=True)
            if not f.exists() or f.stat().st_size != sz:
                write_object(f, sz)
        return root, want, (root / "cached.bin").read_bytes()

    def meta_hang(self):
        """tierfs behind tests/integration/faultproxy.py (in front of nginx's JSON listener):
        every directory listed and a 4-block object read once (O_DIRECT), then every request
        stalls at the proxy (accepted, never answered). 32 lookups of unknown names, one per
        directory, wait for `timeout`;
        meanwhile stats of known names (the kernel's dentries dropped, the directories held
        open so the kernel keeps their inodes: each stat is a LOOKUP answered by tierfs) and
        4 KiB O_DIRECT preads of the cached object are timed one at a time."""
        import mmap
        import threading
        from faultproxy import FaultProxy, faults
        p = self.p
        nops, timeout = p["meta_hang_ops"], p["meta_hang_timeout"]
        root, want, data = self.meta_hang_tree()
        bs = 4 * MiB  # the default block_size
        px = FaultProxy(self.nginx.json_port).start()
        opts = {"timeout": str(timeout), "retries": "0", "max_conns": "32",
                "metadata_ttl": "600", "hot_ttl": "100000000"}
        m = None
        fds, lookups, hang = [], [], None
        res = {"opts": opts, "ops": nops}
        try:
            m = Tierfs("tierfs", self.mnt("tierfs-hang"), px.url + "meta-hang/", opts,
                       self.run_dir / "tierfs-hang.log").start()
            if sorted(os.listdir(m.path("k"))) != sorted(Path(r).name for r in want
                                                          if r.startswith("k/")):
                raise RuntimeError("wrong listing of k/")
            for i in range(32):
                os.listdir(m.path(f"u/{i:02d}"))
            for dd in ["k", "u"] + [f"u/{i:02d}" for i in range(32)]:
                fds.append(os.open(m.path(dd), os.O_RDONLY | os.O_DIRECTORY))
            fd = os.open(m.path("cached.bin"), os.O_RDONLY | os.O_DIRECT)
            fds.append(fd)
            buf = mmap.mmap(-1, bs)
            for off in range(0, len(data), bs):
                if os.preadv(fd, [buf], off) != bs or buf[:] != data[off:off + bs]:
                    raise RuntimeError(f"cached.bin: wrong bytes at {off}")
            small = mmap.mmap(-1, 4096)
            drop_caches()  # dentries of k/*: each stat below is a LOOKUP to tierfs
            hang = faults.stall_headers()
            px.add_rule(lambda r: True, hang)

            def look(i):
                t = time.monotonic()
                try:
                    os.stat(m.path(f"u/{i:02d}/unknown-{os.getpid()}.bin"))
                    e = 0
                except OSError as ex:
                    e = ex.errno
                lookups[i] = (e, time.monotonic() - t)

            lookups = [None] * 32
            ths = [threading.Thread(target=look, args=(i,), daemon=True) for i in range(32)]
            for t in ths:
                t.start()
            try:
                wait_until(lambda: hang.waiting >= 32, 10, "32 lookups stalled at the proxy")
            except TimeoutError:
                pass  # measured anyway, and the number stalled is reported
            res["stalled_at_start"] = hang.waiting
            rng = __import__("random").Random(10)
            st_ms, rd_ms = [], []
            t = time.monotonic()
            st0 = m.stats()  # the control directory never waits on the store either
            res["cat_stats_ms"] = (time.monotonic() - t) * 1000
            t_ops = time.monotonic()
            for i in range(nops):
                t = time.monotonic()
                os.stat(m.path(f"k/f{i:03d}.bin"))
                st_ms.append((time.monotonic() - t) * 1000)
                off = rng.randrange(len(data) // 4096) * 4096
                t = time.monotonic()
                got = os.preadv(fd, [small], off)
                rd_ms.append((time.monotonic() - t) * 1000)
                if got != 4096 or small[:] != data[off:off + 4096]:
                    raise RuntimeError(f"cached.bin: wrong bytes at {off} during the hang")
            res["ops_seconds"] = time.monotonic() - t_ops
            res["stalled_at_end"] = hang.waiting
            # the reads reached tierfs and it fetched nothing; the stats were LOOKUPs (the same
            # stats again, from the kernel's dentries now, show what a dcache hit takes)
            res["check"] = served_check(st0, m.stats(), nops * 4096)
            again = []
            for i in range(nops):
                t = time.monotonic()
                os.stat(m.path(f"k/f{i:03d}.bin"))
                again.append((time.monotonic() - t) * 1000)
            res["stat_again_ms"] = {"p50": percentile(again, 50)}
            res["lookups_done_during_ops"] = sum(1 for x in lookups if x is not None)
            for t in ths:
                t.join(timeout + 30)
            done = [x for x in lookups if x is not None]
            res["unknown"] = {"errnos": sorted({os.strerror(e) if e else "found"
                                                for e, _ in done}),
                              "done": len(done),
                              "max_s": max((s for _, s in done), default=None),
                              "min_s": min((s for _, s in done), default=None)}
            res["stat_ms"] = {"p50": percentile(st_ms, 50), "p99": percentile(st_ms, 99),
                              "max": max(st_ms)}
            res["read_ms"] = {"p50": percentile(rd_ms, 50), "p99": percentile(rd_ms, 99),
                              "max": max(rd_ms)}
            allms = st_ms + rd_ms
            res["all_ms"] = {"p50": percentile(allms, 50), "p99": percentile(allms, 99)}
            log(f"hung store: {res['stalled_at_start']} lookups stalled (still "
                f"{res['stalled_at_end']} after the ops); {nops} stats p50/p99 "
                f"{fmt_num(res['stat_ms']['p50'])}/{fmt_num(res['stat_ms']['p99'])} ms, "
                f"{nops} cached 4 KiB reads p50/p99 {fmt_num(res['read_ms']['p50'])}/"
                f"{fmt_num(res['read_ms']['p99'])} ms (the stats again, from the dentries: p50 "
                f"{fmt_num(res['stat_again_ms']['p50'])} ms; cat .tierfs/stats "
                f"{fmt_num(res['cat_stats_ms'])} ms; check: {res['check'] or 'ok'}); unknown "
                f"names: "
                f"{', '.join(res['unknown']['errnos'])} after "
                f"{fmt_num(res['unknown']['min_s'])}-{fmt_num(res['unknown']['max_s'])} s")
        finally:
            if hang is not None:
                hang.release()
            px.clear_rules()
            px.release()
            for f in fds:
                os.close(f)
            if m is not None and m.proc is not None:
                self.close_mount(m, "scenario 10 (hung store)")
            left = px.stop()
            if left:
                log(f"faultproxy threads did not stop: {left}")
        return res

    def meta_hang_stale(self):
        """10c, stale: the same store and proxy, metadata_ttl=1. Every directory listed, the
        cached object read once (O_DIRECT), then 1.5 s for all of it to go stale, and every
        request stalls at the proxy for longer than metadata_ttl (until the end). 32 lookups
        of unknown names (u/NN/unknown) wait on it; meanwhile, one round at a time: a stat of a
        known name (its dentry expired: a LOOKUP), ls of a known directory, cat
        .tierfs/stats, and an open + 4 KiB O_DIRECT pread + close of the cached object, the
        rounds spread over meta_hang_stale_seconds (several times metadata_ttl, so what the
        rounds themselves refresh goes stale again during the hang). An operation over STUCK_S
        stops the rounds (a store-bound wait: timeout each)."""
        import mmap
        import threading
        from faultproxy import FaultProxy, faults
        STUCK_S = 2.0
        p = self.p
        rounds, timeout = p["meta_hang_stale_ops"], p["meta_hang_timeout"]
        root, want, data = self.meta_hang_tree()
        bs = 4 * MiB
        px = FaultProxy(self.nginx.json_port).start()
        opts = {"timeout": str(timeout), "retries": "0", "max_conns": "32",
                "metadata_ttl": "1", "hot_ttl": "100000000"}
        m, hang, lookups, ths = None, None, [None] * 32, []
        res = {"opts": opts, "rounds": rounds}
        try:
            m = Tierfs("tierfs", self.mnt("tierfs-stale"), px.url + "meta-hang/", opts,
                       self.run_dir / "tierfs-stale.log").start()
            knames = sorted(Path(r).name for r in want if r.startswith("k/"))
            if sorted(os.listdir(m.path("k"))) != knames:
                raise RuntimeError("wrong listing of k/")
            for i in range(32):
                os.listdir(m.path(f"u/{i:02d}"))
            buf = mmap.mmap(-1, bs)
            fd = os.open(m.path("cached.bin"), os.O_RDONLY | os.O_DIRECT)
            try:
                for off in range(0, len(data), bs):
                    if os.preadv(fd, [buf], off) != bs or buf[:] != data[off:off + bs]:
                        raise RuntimeError(f"cached.bin: wrong bytes at {off}")
            finally:
                os.close(fd)
            m.stats()
            time.sleep(1.5)  # names, listings, attributes and versions all past metadata_ttl
            hang = faults.stall_headers()
            px.add_rule(lambda r: True, hang)

            def look(i):
                t = time.monotonic()
                try:
                    os.stat(m.path(f"u/{i:02d}/unknown-{os.getpid()}.bin"))
                    e = 0
                except OSError as ex:
                    e = ex.errno
                lookups[i] = (e, time.monotonic() - t)

            ths = [threading.Thread(target=look, args=(i,), daemon=True) for i in range(32)]
            t_hang = time.monotonic()
            for t in ths:
                t.start()
            try:
                wait_until(lambda: hang.waiting >= 32, 10, "32 refreshes stalled at the proxy")
            except TimeoutError:
                pass  # measured anyway, and the number stalled is reported
            res["stalled_at_start"] = hang.waiting
            small = mmap.mmap(-1, 4096)
            rng = __import__("random").Random(10)

            def open_read():
                fd = os.open(m.path("cached.bin"), os.O_RDONLY | os.O_DIRECT)
                try:
                    off = rng.randrange(len(data) // 4096) * 4096
                    if os.preadv(fd, [small], off) != 4096 or small[:] != data[off:off + 4096]:
                        raise RuntimeError(f"cached.bin: wrong bytes at {off} during the hang")
                finally:
                    os.close(fd)

            ops = {
                "stat": lambda i: os.stat(m.path(f"k/{knames[i % len(knames)]}")),
                "ls": lambda i: os.listdir(m.path(f"u/{i % 32:02d}")),
                "cat_stats": lambda i: (m.mnt / ".tierfs" / "stats").read_bytes(),
                "open_read": lambda i: open_read(),
            }
            ms = {k: [] for k in ops}
            st0 = m.stats()
            res["stuck"] = None
            pace = p["meta_hang_stale_seconds"] / rounds
            for i in range(rounds):
                t_round = time.monotonic()
                for k, fn in ops.items():
                    t = time.monotonic()
                    fn(i)
                    took = time.monotonic() - t
                    ms[k].append(took * 1000)
                    if took > STUCK_S:
                        res["stuck"] = f"{k} took {took:.1f} s in round {i}"
                        break
                if res["stuck"]:
                    break
                time.sleep(max(0.0, pace - (time.monotonic() - t_round)))
            st1 = m.stats()
            res["hang_s"] = time.monotonic() - t_hang
            res["stalled_at_end"] = hang.waiting
            res["check"] = ("not measured: an operation was stuck" if res["stuck"]
                            else served_check(st0, st1, rounds * 4096))
            res["lookups_done_during_ops"] = sum(1 for x in lookups if x is not None)
            for k, v in ms.items():
                res[k + "_ms"] = {"n": len(v), "p50": percentile(v, 50) if v else None,
                                  "p99": percentile(v, 99) if v else None,
                                  "max": max(v) if v else None}
            hang.release()
            px.clear_rules()
            t_back = time.monotonic()
            for t in ths:
                t.join(timeout + 30)
            done = [x for x in lookups if x is not None]
            res["unknown"] = {"errnos": sorted({os.strerror(e) if e else "found"
                                                for e, _ in done}),
                              "done": len(done),
                              "after_back_s": time.monotonic() - t_back}
            log(f"hung store, stale metadata: {res['stalled_at_start']} refreshes stalled (still "
                f"{res['stalled_at_end']} after the ops, {fmt_num(res['hang_s'])} s into the "
                f"hang); p50/p99/max ms: " + ", ".join(
                    f"{k} {fmt_num(res[k + '_ms']['p50'])}/{fmt_num(res[k + '_ms']['p99'])}/"
                    f"{fmt_num(res[k + '_ms']['max'])}" for k in ops)
                + (f"; STUCK: {res['stuck']}" if res["stuck"] else "")
                + f"; check: {res['check'] or 'ok'}; unknown names: "
                f"{', '.join(res['unknown']['errnos'])}, all {res['unknown']['done']} within "
                f"{fmt_num(res['unknown']['after_back_s'])} s of the store's return")
        finally:
            if hang is not None:
                hang.release()
            px.clear_rules()
            px.release()
            if m is not None and m.proc is not None:
                self.close_mount(m, "scenario 10 (hung store, stale metadata)")
            left = px.stop()
            if left:
                log(f"faultproxy threads did not stop: {left}")
        return res

    # -- scenario disk: the disk tier ---------------------------------------------------------

    def scen_disk(self):
        """The disk tier: a disk hit against a local file, recovery at mount, a warm restart
        against s3fs and rclone. Each part is noted and skipped if it fails.
        BENCH_DISK_PARTS=hit,recovery runs only those parts."""
        want = os.environ.get("BENCH_DISK_PARTS", "hit,recovery,restart").split(",")
        res = self.run_parts("scenario disk", [
            (part, fn) for part, fn in (("hit", self.disk_hit), ("recovery", self.disk_recovery),
                                        ("restart", self.disk_restart)) if part in want])
        self.raw["runs"]["disk"] = res
        return res

    def disk_opts(self, cache, disk_size, **extra):
        return dict(self.seq_opts(), cache_dir=str(cache), disk_size=size_opt(disk_size),
                    **extra)

    def disk_fill_through(self, m, rel, size):
        """Read @rel through tierfs mount @m 32 MiB at a time, letting the disk writer catch
        up after each (blocks that find its queue full are not written), until every block
        is on disk."""
        bs = 4 * MiB
        q = 'tierfs_disk_queued_bytes{tier="disk"}'
        with open(m.path(rel), "rb", buffering=0) as f:
            while f.read(32 * MiB):
                wait_until(lambda: m.stats().get(q, 1) == 0, 120, "the disk queue to drain")
        w = m.stats().get('tierfs_disk_writes_total{tier="disk"}', 0)
        if w < (size + bs - 1) // bs:
            raise RuntimeError(f"only {w:.0f} blocks of {rel} reached the disk tier")

    def disk_hit(self):
        """seq.bin read through tierfs with every block on disk and none in memory (a fresh
        mount, page cache dropped), against preader reading the same bytes from seq.bin
        itself, a file on the same disk (page cache dropped too), same reads (1 MiB preads),
        in both access modes: O_DIRECT on both sides, and buffered on both sides. Both after a
        sync: drop_caches drops clean pages only, and the segment files (and a data set just
        generated) are dirty for a while. The local file is a copy of seq.bin written next to
        the cache directory right after the disk tier was filled, so both sides were written
        in the same minute: on this VM a file's read speed after drop_caches depends on how
        recently the host saw it (the same file read at 1.1 to 5 GB/s from one hour to the
        next), and the data set's seq.bin is read far more often than a fresh segment file.
        prefault=on: the mount faults its memory in before
        the read, as a mount that has run a while has; a first read through a just-started
        mount would also pay for zeroing hot_size of fresh pages, which is not the disk's
        cost. Right after the disk-hit read, the same mount reads the object again with the
        page cache dropped: every block a memory hit, the most a disk hit could reach through
        FUSE (its ceiling), measured in the same minute. Pairs alternate which read goes
        first. A tierfs run counts only if it fetched nothing and the disk (then the memory
        tier) served every block."""
        size, rel = self.p["seq_size"], "seq.bin"
        cache = self.fresh_cache_dir("tierfs-disk")
        local = cache.parent / "disk-hit-local.bin"
        same_dev = os.stat(cache.parent).st_dev == os.stat(cache).st_dev
        opts = self.disk_opts(cache, 2 * size, prefault="on")
        logp = self.run_dir / "tierfs-disk.log"
        # filled without readahead: a window grown to 32 blocks outruns the disk writer's
        # queue (16 blocks), and the blocks that find it full are never written
        m = Tierfs("tierfs", self.mnt("tierfs-disk"), self.http_url, dict(opts, readahead="0"),
                   logp).start()
        try:
            self.disk_fill_through(m, rel, size)
        finally:
            self.close_mount(m, "scenario disk, fill")
        shutil.copyfile(self.data / rel, local)
        res = {"size": size, "same_device": same_dev, "invalid": [], "modes": {}}
        for mode in ("direct", "buffered"):
            flag = ["--direct"] if mode == "direct" else []
            mr = res["modes"][mode] = {"disk": [], "memory": [], "local": [], "ratio": [],
                                       "ceiling": []}
            for r in range(self.p["disk_runs"]):
                got = {}
                for what in (("tierfs", "local") if r % 2 == 0 else ("local", "tierfs")):
                    if what == "local":
                        os.sync()  # drop_caches drops clean pages only: a new file's are dirty
                        drop_caches()
                        got["local"] = preader(["seq"] + flag + [local])["mbps"]
                        continue
                    m = Tierfs("tierfs", self.mnt("tierfs-disk"), self.http_url, opts,
                               logp).start()
                    try:
                        st0 = m.stats()
                        os.sync()
                        drop_caches()
                        c = preader(["seq"] + flag + [m.path(rel)])
                        st1 = m.stats()
                        drop_caches()
                        c2 = preader(["seq"] + flag + [m.path(rel)])
                        st2 = m.stats()
                    finally:
                        self.close_mount(m, "scenario disk, hit")
                    why = served_check(st0, st1, size)
                    hits = stat_delta(st0, st1, 'tierfs_cache_hits_total{tier="disk"}')
                    if not why and hits < size // (4 * MiB):
                        why = f"the disk tier served {hits:.0f} blocks"
                    if c["bytes"] != size:
                        why = f"read {c['bytes']} of {size} bytes"
                    why2 = served_check(st1, st2, size)
                    if not why2 and stat_delta(st1, st2, 'tierfs_cache_hits_total{tier="disk"}'):
                        why2 = "the disk tier served part of the memory-hit read"
                    got["tierfs"] = None if why else c["mbps"]
                    got["memory"] = None if why2 else c2["mbps"]
                    for w in (why, why2):
                        if w:
                            res["invalid"].append(f"{mode}: {w}")
                            log(f"disk hit {mode} run {r + 1}: INVALID: {w}")
                mr["disk"].append(got["tierfs"])
                mr["memory"].append(got["memory"])
                mr["local"].append(got["local"])
                mr["ratio"].append(got["tierfs"] / got["local"] if got["tierfs"] else None)
                mr["ceiling"].append(got["memory"] / got["local"] if got["memory"] else None)
                log(f"disk hit {mode} run {r + 1}: disk tier {fmt_num(got['tierfs'])} MB/s, "
                    f"memory tier {fmt_num(got['memory'])} MB/s, local file "
                    f"{fmt_num(got['local'])} MB/s")
        shutil.rmtree(cache, ignore_errors=True)
        local.unlink()
        return res

    def disk_recovery(self):
        """bench/diskfill writes disk_recover_size of 4 MiB records into a cache_dir (through
        disk.c: the real format), scaled down to half the free space if need be; then, with
        the page cache dropped, tierfs mounts it: the time from starting tierfs to the first
        answer of the mount (its stats file), and the scan's own time and blocks found."""
        size = self.p["disk_recover_size"]
        cache = self.fresh_cache_dir("tierfs-recovery")
        free = shutil.disk_usage(cache).free
        if size > free // 2:
            size = max(GiB, free // 2 // GiB * GiB)
            self.notes.append(f"scenario disk: recovery filled {size // GiB} GiB "
                              f"(free space), not {self.p['disk_recover_size'] // GiB}")
        bs = 4 * MiB
        log(f"disk recovery: filling {size / GiB:.0f} GiB of records")
        fill = json.loads(run([str(DISKFILL), str(cache), str(size), str(bs), str(size)],
                              timeout=3600).stdout.strip().splitlines()[-1])
        log(f"disk recovery: {fill['resident_blocks']} blocks resident "
            f"({fill['resident_blocks'] * bs / GiB:.2f} GiB), filled in {fill['seconds']:.0f} s")
        opts = dict(self.disk_opts(cache, size), block_size="4M")
        res = {"size": size, "fill": fill, "answer_s": [], "scan_ms": [], "blocks": []}
        try:
            for r in range(self.p["disk_recover_runs"]):
                os.sync()
                drop_caches()
                t0 = time.monotonic()
                m = Tierfs("tierfs", self.mnt("tierfs-recovery"), self.http_url, opts,
                           self.run_dir / "tierfs-recovery.log")
                m.start()
                try:
                    st = m.stats()  # the first answer
                    res["answer_s"].append(time.monotonic() - t0)
                finally:
                    self.close_mount(m, "scenario disk, recovery")
                res["scan_ms"].append(st.get('tierfs_disk_recovery_ms{tier="disk"}'))
                res["blocks"].append(st.get('tierfs_disk_recovered_blocks{tier="disk"}'))
                log(f"disk recovery run {r + 1}: first answer after {res['answer_s'][-1]:.2f} s, "
                    f"scan {res['scan_ms'][-1]:.0f} ms, {res['blocks'][-1]:.0f} blocks")
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        return res

    def disk_peer(self, system, cache):
        """A mount of @system whose cache lives in @cache and is kept across restarts (the
        command lines of new_mount, without the fresh cache directory)."""
        mp, logp = self.mnt(f"{system}-restart"), self.run_dir / f"{system}-restart.log"
        if system == "tierfs":
            return Tierfs("tierfs", mp, self.http_url,
                          self.disk_opts(cache, 2 * self.p["seq_size"]), logp)
        if system == "s3fs":
            return Mount("s3fs", mp, [
                "s3fs", self.bucket, str(mp), "-f", "-o",
                f"url={self.s3_endpoint},use_path_request_style,passwd_file={self.s3fs_passwd},"
                f"use_cache={cache},ro,endpoint=us-east-1,dbglevel=warn"],
                env=self.s3_env, log_path=logp)
        return Mount("rclone", mp, [
            "rclone", "mount", ":http:", str(mp), "--http-url", self.html_url,
            "--vfs-cache-mode", "full", "--cache-dir", str(cache), "--read-only",
            "--config", str(self.run_dir / "rclone.conf"), "--log-level", "ERROR"],
            log_path=logp)

    def disk_restart(self):
        """Per system: a mount reads seq.bin (the working set) cold, filling its cache, and is
        unmounted cleanly; the page cache is dropped (the servers' sources read again), the
        same command mounts again on the same cache directory and seq.bin is read again:
        bytes of seq.bin the server sent for that re-read (nginx's log: tierfs on the JSON
        listener, rclone on the HTML one, s3fs through the S3 proxy) and its time, from the
        mount's start to the last byte."""
        size, rel = self.p["seq_size"], "seq.bin"
        ports = {"tierfs": self.nginx.json_port, "s3fs": self.nginx.proxy_port,
                 "rclone": self.nginx.html_port}
        res = {}
        for system in ["tierfs"] + (["s3fs", "rclone"] if self.peers else []):
            cache = self.fresh_cache_dir(f"{system}-restart")
            try:
                self.rewarm([rel])
                m = self.disk_peer(system, cache).start()
                try:
                    wait_until(lambda: m.path(rel).exists(), 30, f"{system} to list {rel}")
                    if system == "tierfs":
                        self.disk_fill_through(m, rel, size)
                    else:
                        c = preader(["seq", m.path(rel)])
                        if c["bytes"] != size:
                            raise RuntimeError(f"first read {c['bytes']} of {size} bytes")
                finally:
                    self.close_mount(m, "scenario disk, before the restart")
                os.sync()
                drop_caches()
                self.rewarm([rel])
                mark = self.nginx.mark()
                t0 = time.monotonic()
                m = self.disk_peer(system, cache).start()
                try:
                    wait_until(lambda: m.path(rel).exists(), 30, f"{system} to list {rel}")
                    c = preader(["seq", m.path(rel)])
                    t = time.monotonic() - t0
                finally:
                    self.close_mount(m, "scenario disk, after the restart")
                if c["bytes"] != size:
                    raise RuntimeError(f"re-read {c['bytes']} of {size} bytes")
                time.sleep(0.3)  # nginx logs a request when it ends; the unmount ended them
                sent = self.nginx.bytes_for(mark, lambda u: u.endswith("/" + rel), ports[system])
                res[system] = {"fetched": sent, "seconds": t, "size": size}
                log(f"warm restart {system}: {sent / MiB:.1f} MiB of {size // MiB} fetched, "
                    f"re-read in {t:.2f} s")
            except Exception as e:
                self.peer_failed(system, "scenario disk, warm restart", e)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
        return res

    # -- scenario write: writing through the mount (issue 29) --------------------------------

    # W1 file://'s target. tierfs does what the local loop does (write the bytes, fsync them)
    # and on top of it one FUSE round trip per write(2), a copy out of the request into a
    # part buffer and a copy of each block into the hot tier, all on the same 2 cores as the
    # writer. Half the local rate leaves that overhead as much time as the work itself; below
    # it, tierfs is adding work of its own on the way (a wait, a copy too many).
    WRITE_FILE_TARGET = 0.5

    def scen_write(self):
        """Writing through the mount (issue 29), `--only write`. Each part is its own row: one
        that fails is noted and the others still run. --set write_rows=seq,readback,rss."""
        want = set(self.p["write_rows"].split(","))
        self.wbucket = "wbench"
        c = self.wclient = self.s3_client()  # one client: creating one takes a while
        try:
            c.create_bucket(Bucket=self.wbucket)
        except c.exceptions.BucketAlreadyOwnedByYou:
            pass
        # what every writer writes: seq.bin's incompressible bytes, held in memory
        self.wdata = memoryview((self.data / "seq.bin").read_bytes())
        self.wsha = hashlib.sha256(self.wdata).hexdigest()
        parts = (("seq", self.write_seq), ("readback", self.write_readback),
                 ("rss", self.write_rss))
        res = self.run_parts("scenario write", [(n, fn) for n, fn in parts if n in want])
        self.raw["runs"]["write"] = res
        return res

    def write_mount(self, system, extra=None, tag="w"):
        """A writable mount of @system on the write bucket (tierfs-file: on the store
        directory), not started. tierfs: defaults plus allow_write and @extra. s3fs: its
        defaults (multipart_size 10 MB, parallel_count 5, a temporary file per written file).
        rclone: `--vfs-cache-mode writes`, what it needs to write sequentially, and
        `--vfs-write-back 0s`: it uploads at once after close (by default 5 s later)."""
        mp, logp = self.mnt(f"{system}-{tag}"), self.run_dir / f"{system}-{tag}.log"
        if system == "tierfs-s3":
            o = dict({"endpoint": self.s3_endpoint, "path_style": None, "region": "us-east-1",
                      "allow_write": None}, **(extra or {}))
            return Tierfs("tierfs-s3", mp, f"s3://{self.wbucket}", o, logp, env=self.s3_env)
        if system == "tierfs-file":
            return Tierfs("tierfs-file", mp, f"file://{self.wstore}",
                          dict({"allow_write": None}, **(extra or {})), logp)
        if system == "s3fs":
            return Mount("s3fs", mp, [
                "s3fs", self.wbucket, str(mp), "-f", "-o",
                f"url={self.s3_endpoint},use_path_request_style,passwd_file={self.s3fs_passwd},"
                f"endpoint=us-east-1,dbglevel=warn"], env=self.s3_env, log_path=logp)
        if system == "rclone":
            cache = self.fresh_cache_dir(f"rclone-{tag}")
            env = {k: v for k, v in self.s3_env.items() if k != "AWS_CA_BUNDLE"}
            return Mount("rclone", mp, [
                "rclone", "mount", f":s3:{self.wbucket}", str(mp), "--s3-provider", "Other",
                "--s3-endpoint", self.s3_endpoint, "--s3-access-key-id", "S3RVER",
                "--s3-secret-access-key", "S3RVER", "--s3-region", "us-east-1",
                "--s3-no-check-bucket", "--vfs-cache-mode", "writes", "--vfs-write-back", "0s",
                "--cache-dir", str(cache), "--config", str(self.run_dir / "rclone.conf"),
                "--log-level", "ERROR"], env=env, log_path=logp)
        raise ValueError(system)

    @staticmethod
    def write_file(path, bs, data, fsync=False):
        """Create @path (O_EXCL, as Files.copy does) and write @data to it in @bs writes, fsync
        it if @fsync, close it. @return the seconds from open to close's return."""
        t0 = time.monotonic()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            off, n = 0, len(data)
            while off < n:
                off += os.write(fd, data[off:off + bs])
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)  # tierfs and s3fs answer the upload's error here
        return time.monotonic() - t0

    def store_size(self, key):
        """The object's size in s3rver (botocore HEAD), None if it is not there."""
        try:
            return self.wclient.head_object(Bucket=self.wbucket, Key=key)["ContentLength"]
        except Exception as e:
            if "404" in str(e) or "Not Found" in str(e):
                return None
            raise

    def write_one(self, system, m, key, bs, cpu=None):
        """One timed write of self.wdata as @key through @m (None: the local directory).
        @return MB/s. S3: the object must be in s3rver whole when the time ends: tierfs and s3fs
        return from close() after the upload; rclone returns before it, so its time runs to
        the object's arrival (HEAD every 20 ms). file://: the file in the store directory.
        @cpu, a dict: filled with the CPU seconds per wall second that s3rver, nginx (the
        proxy in front of it) and the mount's process used during the write."""
        size = len(self.wdata)
        pids = {"s3rver": self.s3.proc.pid, "nginx": self.nginx.proc.pid}
        if m is not None:
            pids["fs"] = m.proc.pid
        c0, w0 = {k: cpu_seconds(v) for k, v in pids.items()}, time.monotonic()
        if system == "local":
            path = self.wlocal / key
            t = self.write_file(path, bs, self.wdata, fsync=True)
            got = path.stat().st_size
            path.unlink()
        elif system == "tierfs-file":
            t = self.write_file(m.path(key), bs, self.wdata)
            got = (self.wstore / key).stat().st_size
            (self.wstore / key).unlink()  # behind tierfs's back: every key is new anyway
        else:
            t0 = time.monotonic()
            self.write_file(m.path(key), bs, self.wdata)
            t = time.monotonic() - t0
            got = self.store_size(key)
            if system == "rclone":
                deadline = time.monotonic() + 600
                while got != size and time.monotonic() < deadline:
                    time.sleep(0.02)
                    got = self.store_size(key)
                t = time.monotonic() - t0
            self.wclient.delete_object(Bucket=self.wbucket, Key=key)
        if cpu is not None:
            wall = time.monotonic() - w0
            for k, v in pids.items():
                c1 = cpu_seconds(v)
                cpu[k] = (c1 - c0[k]) / wall if c1 is not None and c0[k] is not None else None
        if got != size:
            raise RuntimeError(f"{key}: {got} bytes in the store of {size}"
                               + (" when close() returned" if system != "rclone" else ""))
        return size / t / 1e6

    def write_ceiling(self, key, part=8 * MiB, inflight=4):
        """s3rver's own ceiling for what tierfs sends it: botocore (in this process) uploads
        self.wdata as @key through the same proxy, a multipart upload of @part parts with
        @inflight in flight (tierfs's part_size and write_parts defaults). @return MB/s."""
        from concurrent.futures import ThreadPoolExecutor
        import botocore.session
        from botocore.config import Config

        if not getattr(self, "wclient_proxy", None):
            self.wclient_proxy = botocore.session.get_session().create_client(
                "s3", region_name="us-east-1", endpoint_url=self.s3_endpoint,
                aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
                config=Config(s3={"addressing_style": "path"}, proxies={},
                              max_pool_connections=16))
        c, d, size = self.wclient_proxy, self.wdata, len(self.wdata)
        t0 = time.monotonic()
        uid = c.create_multipart_upload(Bucket=self.wbucket, Key=key)["UploadId"]

        def one(i):
            body = bytes(d[i * part:(i + 1) * part])
            return c.upload_part(Bucket=self.wbucket, Key=key, UploadId=uid, PartNumber=i + 1,
                                 Body=body)["ETag"]

        with ThreadPoolExecutor(inflight) as ex:
            etags = list(ex.map(one, range((size + part - 1) // part)))
        c.complete_multipart_upload(Bucket=self.wbucket, Key=key, UploadId=uid, MultipartUpload={
            "Parts": [{"ETag": e, "PartNumber": i + 1} for i, e in enumerate(etags)]})
        t = time.monotonic() - t0
        got = self.store_size(key)
        self.wclient.delete_object(Bucket=self.wbucket, Key=key)
        if got != size:
            raise RuntimeError(f"{key}: {got} bytes in the store of {size}")
        return size / t / 1e6

    def write_seq(self):
        """W1. Every system mounted once, as a broker's mount runs, and given untimed writes
        first (connections open, memory backed): one for a peer; for tierfs as many as fill
        its hot tier (hot_size, 1G by default) once, since the first pass through the ring
        writes into memory this VM has not backed yet (docs/performance.md) and a mount that has run a
        while has it backed. Then write_runs runs, each of 1 MiB writes then 8 KiB writes,
        the systems in an order that rotates, os.sync() and write_settle s before each timed
        write; in each 1 MiB pass also s3rver's ceiling (write_ceiling)."""
        p, size = self.p, len(self.wdata)
        self.wstore = self.run_dir / "wstore"
        self.wlocal = self.run_dir / "wlocal"  # the same filesystem as the store directory
        for d in (self.wstore, self.wlocal):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        systems = ["tierfs-s3"]
        skipped = {}
        for peer in ("s3fs", "rclone"):
            if not self.peers:
                skipped[peer] = "no peers (--quick without --peers, or --no-peers)"
            elif not shutil.which(peer):
                skipped[peer] = f"{peer} is not installed (scripts/bench could not install it)"
            else:
                systems.append(peer)
        systems += ["tierfs-file", "local"]
        bss = [MiB, 8 * 1024]
        res = {"size": size, "skipped": skipped, "mbps": {s: {str(bs): [] for bs in bss}
                                                           for s in systems}, "stats": {},
               "cpu": {}, "ceiling": []}
        mounts = {}
        try:
            for s in systems:
                if s == "local":
                    continue
                try:
                    m = mounts[s] = self.write_mount(s).start()
                    for i in range((GiB + size - 1) // size if s.startswith("tierfs") else 1):
                        self.write_one(s, m, f"warm-{s}-{i}.bin", MiB)
                except Exception as e:
                    if s in mounts:
                        self.close_mount(mounts.pop(s), "failed")
                    self.peer_failed(s, "scenario write W1, mount and first write", e)
                    skipped[s] = f"failed: {str(e)[-200:]}"
            for run_i in range(p["write_runs"]):
                for bi, bs in enumerate(bss):
                    k = (run_i * len(bss) + bi) % len(systems)
                    for s in systems[k:] + systems[:k] + (["ceiling"] if bs == MiB else []):
                        if s not in ("local", "ceiling") and s not in mounts:
                            continue
                        os.sync()
                        time.sleep(p["write_settle"])
                        if s == "ceiling":
                            v = self.write_ceiling(f"ceiling-{run_i}.bin")
                            res["ceiling"].append(v)
                            log(f"write run {run_i + 1} s3rver ceiling (botocore multipart, "
                                f"8 MiB parts, 4 in flight): {v:.0f} MB/s")
                            continue
                        m = mounts.get(s)
                        st0 = m.stats() if isinstance(m, Tierfs) else None
                        cpu = {}
                        try:
                            v = self.write_one(s, m, f"{s}-{bs}-{run_i}.bin", bs, cpu)
                        except Exception as e:
                            if s in mounts:
                                self.close_mount(mounts.pop(s), "failed")
                            self.peer_failed(s, f"scenario write W1 run {run_i + 1}", e)
                            skipped[s] = f"failed: {str(e)[-200:]}"
                            continue
                        res["mbps"][s][str(bs)].append(v)
                        res["cpu"].setdefault(s, {}).setdefault(str(bs), []).append(cpu)
                        if st0 is not None:
                            st1 = m.stats()
                            res["stats"].setdefault(s, []).append({
                                "bs": bs, "waits": stat_delta(
                                    st0, st1, "tierfs_write_buffer_waits_total"),
                                "parts": stat_delta(st0, st1, "tierfs_backend_upload_parts_total"),
                                "retries": stat_delta(
                                    st0, st1, "tierfs_backend_upload_retries_total")})
                        log(f"write run {run_i + 1} {s}: {bs // 1024} KiB writes, "
                            f"{v:.0f} MB/s; CPU s/s " + ", ".join(
                                f"{k} {fmt_num(x)}" for k, x in cpu.items()))
        finally:
            for m in mounts.values():
                self.close_mount(m, "scenario write W1")
            shutil.rmtree(self.wstore, ignore_errors=True)
            shutil.rmtree(self.wlocal, ignore_errors=True)
        return res

    def write_wait_published(self, m, blocks, timeout=60):
        """Wait until the writer @m has put @blocks written blocks into Redis and has none
        queued (or has given up on the rest: drops, errors). @return its stats then."""
        def done():
            st = m.stats()
            settled = (self.stat_sum(st, "shared_puts_total") +
                       self.stat_sum(st, "shared_put_drops_total") +
                       self.stat_sum(st, "shared_put_errors_total"))
            return self.stat_sum(st, "shared_put_queued_bytes") == 0 and settled >= blocks
        try:
            wait_until(done, timeout, "the written blocks in Redis", interval=0.1)
        except TimeoutError as e:
            self.notes.append(f"scenario write W2: {e}")
        return m.stats()

    def read_back(self, m, key):
        """drop_caches, then read @key through @m, 1 MiB reads. @return (bytes fetched from
        the store meanwhile, sha256 of what was read, bytes read, seconds)."""
        drop_caches()
        st0 = m.stats()
        h, n = hashlib.sha256(), 0
        t0 = time.monotonic()
        with open(m.path(key), "rb", buffering=0) as f:
            while b := f.read(MiB):
                h.update(b)
                n += len(b)
        t = time.monotonic() - t0
        st1 = m.stats()
        return (stat_delta(st0, st1, "tierfs_backend_received_bytes_total"), h.hexdigest(), n,
                t, st0, st1)

    def write_readback(self):
        """W2. One object written with 1 MiB writes through a mount sharing a new Redis (no
        persistence, maxmemory twice the object, not filled: this counts bytes, not Redis's
        latency), hot_size twice the object (it holds it whole, as the read scenarios' mounts
        do); (a) page cache, dentries and inodes dropped, read back through the same mount;
        (b) once the writer has put every block into Redis, a second mount with the same
        shared= (read-only) reads it back, caches dropped first. Bytes fetched from the store:
        tierfs_backend_received_bytes_total of the reading mount."""
        size = len(self.wdata)
        bs = 4 * MiB  # block_size's default
        blocks = (size + bs - 1) // bs
        key = "readback.bin"
        res = {"size": size, "blocks": blocks}
        proc, port = self.redis_start("redis-write", fill=False,
                                      maxmemory=str(2 * size + 256 * MiB))
        shared = {"shared": f"redis://127.0.0.1:{port}"}
        opts = dict(self.seq_opts(), **shared)
        a = b = None
        try:
            a = self.write_mount("tierfs-s3", opts, tag="wa").start()
            t = self.write_file(a.path(key), MiB, self.wdata)
            got = self.store_size(key)
            if got != size:
                raise RuntimeError(f"{key}: {got} bytes in the store of {size} after close()")
            res["write_mbps"] = size / t / 1e6
            fa, ha, na, ta, _, sta = self.read_back(a, key)
            res["a"] = {"fetched": fa, "ok": ha == self.wsha and na == size, "seconds": ta,
                        "written_blocks": self.stat_sum(sta, "cache_written_blocks_total")}
            log(f"write read-back, this mount: {fa / MiB:.2f} MiB fetched of {size // MiB} MiB, "
                f"sha256 {'right' if res['a']['ok'] else 'WRONG'}")
            sw = self.write_wait_published(a, blocks)
            res["writer"] = {k: self.stat_sum(sw, k) for k in (
                "shared_puts_total", "shared_put_drops_total", "shared_put_errors_total",
                "shared_put_queued_bytes", "cache_published_blocks_total")}
            bo = {k: v for k, v in opts.items() if k != "allow_write"}
            b = Tierfs("tierfs-s3", self.mnt("tierfs-s3-wb"), f"s3://{self.wbucket}",
                       dict(bo, endpoint=self.s3_endpoint, path_style=None, region="us-east-1"),
                       self.run_dir / "tierfs-s3-wb.log", env=self.s3_env).start()
            wait_until(lambda: b.path(key).exists(), 30, f"the second mount to list {key}")
            fb, hb, nb, tb, s0, s1 = self.read_back(b, key)
            res["b"] = {"fetched": fb, "ok": hb == self.wsha and nb == size, "seconds": tb,
                        "shared_hits": (self.stat_sum(s1, "shared_hits_total") -
                                        self.stat_sum(s0, "shared_hits_total"))}
            log(f"write read-back, a second mount sharing Redis: {fb / MiB:.2f} MiB fetched of "
                f"{size // MiB} MiB, sha256 {'right' if res['b']['ok'] else 'WRONG'}; writer: "
                + ", ".join(f"{k} {v:.0f}" for k, v in res["writer"].items()))
        finally:
            for m in (b, a):
                if m:
                    self.close_mount(m, "scenario write W2")
            stop_proc(proc)
            STATE.save()
            try:
                self.wclient.delete_object(Bucket=self.wbucket, Key=key)
            except Exception:
                pass
        return res

    def write_rss(self):
        """W3. A fresh mount with tierfs's defaults (hot_size 1G, lagging_size 128M,
        write_buffer 64M) and allow_write; 4 threads each write a file of the write size at
        once with 1 MiB writes; VmHWM before unmounting against tierfs_memory_bound_bytes
        (hot_size + lagging_size + 64 MiB + write_buffer); every object then in the store
        whole."""
        import threading
        size = len(self.wdata)
        m = self.write_mount("tierfs-s3", tag="wr").start()
        errs, keys = [], [f"rss-{i}.bin" for i in range(4)]

        def writer(key):
            try:
                self.write_file(m.path(key), MiB, self.wdata)
            except OSError as e:
                errs.append(f"{key}: {e}")

        try:
            t0 = time.monotonic()
            ts = [threading.Thread(target=writer, args=(k,), daemon=True) for k in keys]
            for t in ts:
                t.start()
            for t in ts:
                t.join(timeout=1200)
            secs = time.monotonic() - t0
            h, st = m.hwm(), m.stats()
        finally:
            self.close_mount(m, "scenario write W3")
        sizes = [self.store_size(k) for k in keys]
        for k in keys:
            self.wclient.delete_object(Bucket=self.wbucket, Key=k)
        if errs or sizes != [size] * 4:
            raise RuntimeError(f"4 writers: {errs[:3]}; sizes in the store {sizes}")
        o = m.opts
        bound = (parse_size(o.get("hot_size", "1G")) + parse_size(o.get("lagging_size", "128M"))
                 + 64 * MiB + parse_size(o.get("write_buffer", "64M")))
        res = {"size": size, "vm_hwm": h, "bound": bound,
               "bound_stat": st.get("tierfs_memory_bound_bytes"),
               "seconds": secs, "mbps": 4 * size / secs / 1e6,
               "waits": st.get("tierfs_write_buffer_waits_total")}
        log(f"4 concurrent writes: VmHWM {h / MiB:.0f} MiB, bound {bound / MiB:.0f} MiB "
            f"(memory_bound_bytes {fmt_num((res['bound_stat'] or 0) / MiB)} MiB), "
            f"{res['mbps']:.0f} MB/s together, {res['waits']} buffer waits")
        return res

    # -- report -----------------------------------------------------------------------------

    def machine(self):
        def ver(cmd, pat=None):
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
                t = (r.stdout + r.stderr).strip()
                if pat:
                    m = re.search(pat, t)
                    return m.group(1) if m else t.splitlines()[0]
                return t.splitlines()[0] if t else "?"
            except Exception:
                return "not found"

        cpu = "?"
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        s3v = json.loads((REPO / "tests/integration/node_modules/s3rver/package.json")
                         .read_text())["version"]
        git = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                             capture_output=True, text=True).stdout.strip()
        return {
            "nproc": os.cpu_count(), "cpu": cpu, "memory": f"{mem / 1024 / 1024:.1f} GiB",
            "kernel": platform.release(), "os": ver(["cat", "/etc/debian_version"]),
            "tierfs": f"{ver([str(TIERFS), '-V'])} (git {git})",
            "libfuse": ver(["pkg-config", "--modversion", "fuse3"]),
            "nginx": ver(["nginx", "-v"], r"nginx/(\S+)"),
            "node": ver(["node", "--version"]), "s3rver": s3v,
            "curl": ver(["curl", "--version"], r"curl (\S+)"),
            "s3fs": ver(["s3fs", "--version"], r"V(\S+)"),
            "rclone": ver(["rclone", "version"], r"rclone (\S+)"),
            "httpdirfs": ver(["httpdirfs", "--version"], r"HTTPDirFS version (\S+)"),
            "gnuplot": ver(["gnuplot", "--version"]),
            "loadavg_start": self.load_start, "loadavg_end": Path("/proc/loadavg").read_text().split()[:3],
        }


def target_ok(v, lim, kind):
    if v is None:
        return False
    if kind == "band":
        return lim[0] <= v <= lim[1]
    return v >= lim if kind == "min" else v <= lim


def fmt_num(v, unit=""):
    if v is None:
        return "n/a"
    if abs(v) >= 100:
        s = f"{v:.0f}"
    elif abs(v) >= 10:
        s = f"{v:.1f}"
    else:
        s = f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
    return s + unit


def summarize(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None, None, None
    return statistics.median(vals), min(vals), max(vals)


def cell(vals, unit="", show_range=True):
    med, lo, hi = summarize(vals)
    if med is None:
        return "n/a"
    s = fmt_num(med, unit)
    if show_range and len([v for v in vals if v is not None]) > 1:
        s += f" [{fmt_num(lo)}–{fmt_num(hi)}]"
    return s


def cold_report(b, seq, cols):
    """Rows 1-1c (cold sequential reads) and their targets."""
    rows, targets = [], []
    prr = per_run_ratio
    P = b.peers

    def col(s, k):
        return seq[s][k] if s in seq else []

    # 1 cold sequential
    t, t3 = col("tierfs", "cold"), col("tierfs-s3", "cold")
    peer_ratios = {}
    cells = {}
    for k in cols:
        ref = t3 if k == "s3fs" else t
        r = prr(ref, col(k, "cold")) if k in seq else None
        cells[k] = (cell(col(k, "cold"), " MB/s"), r)
        if k in ("s3fs", "rclone", "httpdirfs") and r is not None:
            peer_ratios[k] = r
    r_curl, r_null = cells["curl"][1], cells["nullfs"][1]
    # one target per line: the first issue's (>= curl, > every peer) and the cold-read issue's
    # (>= 0.8x nullfs, >= 1.5x rclone over http, >= 1.2x s3fs through the S3 API)
    need = {"rclone": 1.5, "s3fs": 1.2, "httpdirfs": 1.0}
    met1 = (r_curl is not None and r_curl >= 1.0 and r_null is not None and r_null >= 0.8
            and all(v >= need[p] for p, v in peer_ratios.items()))
    rows.append(("1. cold sequential read, 1 obj of %d MiB, MB/s (http: nginx), defaults"
                 % (b.p["seq_size"] // MiB),
                 cell(t, " MB/s"), cells,
                 ">= 1.0x curl, >= 0.8x nullfs, >= 1.5x rclone, > httpdirfs; s3fs: row 1b"
                 + ("" if P else " (peers not run)"), met1))
    targets.append(("cold seq vs curl", r_curl, 1.0, "min"))
    targets.append(("cold seq vs nullfs", r_null, 0.8, "min"))
    for p, v in peer_ratios.items():
        targets.append((f"cold seq vs {p}" + (" (both via s3rver)" if p == "s3fs" else ""),
                        v, need[p], "min"))
    # 1b: the S3 API, same server as s3fs
    cells = {k: ("n/a", None) for k in cols}
    cells["curl"] = (cell(col("curl-s3", "cold"), " MB/s"), prr(t3, col("curl-s3", "cold")))
    if "s3fs" in seq:
        cells["s3fs"] = (cell(col("s3fs", "cold"), " MB/s"), prr(t3, col("s3fs", "cold")))
    r_s3fs = cells["s3fs"][1]
    rows.append(("1b. cold sequential read via S3 API (s3rver behind nginx proxy), MB/s",
                 cell(t3, " MB/s"), cells, ">= 1.2x s3fs" + ("" if P else " (peers not run)"),
                 r_s3fs is not None and r_s3fs >= 1.2 if P else None))
    # 1c: what bounds row 1 here: new memory. A fresh mount's cold read writes every block
    # into memory the process has never touched; on this VM the hypervisor backs such pages
    # at a few hundred MB/s (preader touch). prefault=on takes the memory at mount instead.
    tp, touch = col("tierfs-pf", "cold"), col("touch", "cold")
    if any(tp):
        cells = {k: (cell(col(k, "cold"), " MB/s"), prr(tp, col(k, "cold"))) if k in seq
                 else ("n/a", None) for k in cols}
        cells["s3fs"] = ("n/a", None)
        rt = prr(t, touch)
        rows.append(("1c. (extra) the cold read of row 1 with prefault=on (both tiers' memory "
                     "taken at mount, as a mount that has filled its cache once has it); in the "
                     "tierfs cell also the rate at which a process gets new memory here "
                     "(`preader touch`, %d MiB) and row 1's ratio to it"
                     % (b.p["seq_size"] // MiB),
                     cell(tp, " MB/s") + f"; new memory {cell(touch, ' MB/s')}, row 1 / new "
                     f"memory {fmt_num(rt)}x", cells, "(info)", None))
    # 1d: row 1b the same way, its tier's memory taken at mount
    tp3 = col("tierfs-s3-pf", "cold")
    if any(tp3):
        cells = {k: ("n/a", None) for k in cols}
        cells["curl"] = (cell(col("curl-s3", "cold"), " MB/s"), prr(tp3, col("curl-s3", "cold")))
        if "s3fs" in seq:
            cells["s3fs"] = (cell(col("s3fs", "cold"), " MB/s"), prr(tp3, col("s3fs", "cold")))
        rows.append(("1d. (extra) the cold read of row 1b with prefault=on", cell(tp3, " MB/s"),
                     cells, "(info)", None))
    return rows, targets


def per_run_ratio(a, c):
    """median over runs of the per-run ratio a[i] / c[i] (runs are interleaved, so each
    ratio compares figures taken close together)"""
    rs = [x / y for x, y in zip(a, c) if x and y]
    return statistics.median(rs) if rs else None


def build_report(b, seq, multi, iso, rate):
    """The table rows: (scenario, tierfs cell, {column: (cell, ratio)}, target, met)."""
    cols = ["nullfs", "curl", "s3fs", "rclone", "httpdirfs"]
    rows = []
    targets = []

    def ratio(a, c):
        return a / c if a and c else None

    prr = per_run_ratio

    def col(s, k):
        return seq[s][k] if s in seq else []

    r1, t1 = cold_report(b, seq, cols)
    rows += r1
    targets += t1
    # 2 cached sequential
    t = col("tierfs", "cached")
    cells = {}
    for k in cols:
        if k in seq and any(col(k, "cached")):
            cells[k] = (cell(col(k, "cached"), " MB/s"), prr(t, col(k, "cached")))
        else:
            cells[k] = ("n/a", None)
    r_null = cells["nullfs"][1]
    inv = [w for ws in seq["tierfs"].get("invalid", []) if ws for w in ws]
    nruns = len(col("tierfs", "cached"))
    bad2 = sum(1 for ws in seq["tierfs"].get("invalid", []) if ws and any(
        w.startswith("2:") for w in ws))
    rows.append(("2. cached sequential re-read, MB/s (same mount, echo 3 > drop_caches before "
                 "each pass; tierfs: a run counts only if it served every byte and fetched none)",
                 cell(t, " MB/s") + (f"; **{bad2} of {nruns} runs INVALID**" if bad2 else ""),
                 cells, ">= 0.8x nullfs, every run valid",
                 r_null is not None and r_null >= 0.8 and not bad2))
    targets.append(("cached seq vs nullfs", r_null, 0.8, "min"))
    bad_runs = sum(1 for ws in seq["tierfs"].get("invalid", []) if ws)
    targets.append(("cached runs valid (tierfs served every byte, fetched none)",
                    (nruns - bad_runs) / nruns if nruns else None, 1.0, "min"))
    for w in inv:
        b.notes.append(f"invalid cached measurement: {w}")
    # 2b the fadvise variant, for comparison only
    cells = {}
    tf = col("tierfs", "fadvise") if "tierfs" in seq else []
    for k in cols:
        fv = seq[k].get("fadvise") if k in seq else None
        cells[k] = (cell(fv, " MB/s"), prr(tf, fv)) if fv and any(fv) else ("n/a", None)
    rows.append(("2b. (extra) the same re-read after posix_fadvise(DONTNEED) only, right after "
                 "a read: may be served by the page cache, kept to compare with older results",
                 cell(tf, " MB/s"), cells, "(info)", None))
    # 3 random reads
    cells = {}
    iops = {k: [r["iops"] if r else None for r in seq[k]["rand"]] for k in seq
            if any(seq[k]["rand"])}
    p50 = {k: [r["lat_us"]["p50"] for r in seq[k]["rand"] if r] for k in iops}
    p99 = {k: [r["lat_us"]["p99"] for r in seq[k]["rand"] if r] for k in iops}
    for k in cols:
        if k in iops:
            cells[k] = (f"{cell(iops[k])} IOPS, p50/p99 {fmt_num(median(p50[k]))}/"
                        f"{fmt_num(median(p99[k]))} us", prr(iops.get("tierfs", []), iops[k]))
        else:
            cells[k] = ("n/a", None)
    r_null = cells["nullfs"][1]
    bad3 = sum(1 for ws in seq["tierfs"].get("invalid", []) if ws and any(
        w.startswith("3:") for w in ws))
    rows.append(("3. 4 KiB random O_DIRECT reads of the cached object, 1 thread QD1 (IOPS, "
                 "p50/p99 latency; drop_caches before each slice, tierfs checked as in 2)",
                 f"{cell(iops.get('tierfs', []))} IOPS, p50/p99 "
                 f"{fmt_num(median(p50.get('tierfs', [])))}/"
                 f"{fmt_num(median(p99.get('tierfs', [])))} us"
                 + (f"; **{bad3} runs INVALID**" if bad3 else ""),
                 cells, ">= 0.8x nullfs IOPS, every run valid",
                 r_null is not None and r_null >= 0.8 and not bad3))
    targets.append(("4K random IOPS vs nullfs", r_null, 0.8, "min"))
    # 4 sixteen readers
    cells = {}
    tr = [e["ratio"] for e in multi["tierfs"]]
    for k in cols:
        if k in multi and k != "nullfs":
            rr = [e["ratio"] for e in multi[k]]
            cells[k] = (f"{cell(rr, 'x')} fetched, {fmt_num(median([e['mbps'] for e in multi[k]]))}"
                        " MB/s", ratio(summarize(tr)[0], summarize(rr)[0]))
        elif k == "nullfs":
            cells[k] = (f"{fmt_num(median([e['mbps'] for e in multi[k]]))} MB/s aggregate",
                        ratio(median([e["mbps"] for e in multi["tierfs"]]),
                              median([e["mbps"] for e in multi[k]])))
        elif k == "curl":
            cells[k] = ("1.00x (one GET)", None)
        else:
            cells[k] = ("n/a", None)
    worst = max(tr)
    rows.append(("4. 16 readers of one cold object, reader i from i/16: bytes at server / object "
                 "(aggregate MB/s)", f"{cell(tr, 'x')} fetched, "
                 f"{fmt_num(median([e['mbps'] for e in multi['tierfs']]))} MB/s", cells,
                 "<= 1.05x (every run)", worst <= 1.05))
    targets.append(("16 readers fetched/object", worst, 1.05, "max"))
    # 5 isolation
    a99 = [x["lat_us"]["p99"] for x in iso["alone"]]
    w99 = [x["lat_us"]["p99"] for x in iso["replay"]]
    a50 = [x["lat_us"]["p50"] for x in iso["alone"]]
    w50 = [x["lat_us"]["p50"] for x in iso["replay"]]
    pr = [w / a for w, a in zip(w99, a99)]
    r99 = median(pr)
    # the noise floor: the same ratio between consecutive slices that both ran alone
    aa = [y / x for x, y in zip(a99, a99[1:])]
    hr = iso["total_hit_ratio"]
    rb = iso["replay_bytes"]
    cells = {k: ("n/a", None) for k in cols}
    rows.append(("5. isolation: tail 4 KiB O_DIRECT re-reads of the hot set, p50/p99 us alone "
                 "vs during a replay of old objects (replay volume in cache sizes); tail hit ratio",
                 f"alone {fmt_num(median(a50))}/{fmt_num(median(a99))}, replay "
                 f"{fmt_num(median(w50))}/{fmt_num(median(w99))} (replay "
                 f"{rb['lagging_fetched'] / rb['cache_bytes']:.1f}x the cache); p99 ratio "
                 f"{r99:.2f}x [{min(pr):.2f}–{max(pr):.2f}] over {len(pr)} pairs (alone "
                 f"against the next alone slice: {fmt_num(median(aa) if aa else None)}x "
                 f"[{fmt_num(min(aa, default=None))}–{fmt_num(max(aa, default=None))}]); "
                 f"hit ratio {100 * hr:.2f}%", cells,
                 "p99 ratio <= 1.2x, hit ratio >= 99%", r99 <= 1.2 and hr >= 0.99))
    mf = iso.get("machine")
    if mf:
        m99 = [w["lat_us"]["p99"] / a["lat_us"]["p99"] for a, w in zip(mf["alone"], mf["curl"])]
        rows.append(("5b. (extra) the machine's floor for row 5: the same tail reads, with the "
                     f"replay's bytes ({mf['rate']}B/s) read by two curl processes straight from "
                     "nginx instead of through tierfs", f"p99 ratio {median(m99):.2f}x "
                     f"[{min(m99):.2f}–{max(m99):.2f}] over {len(m99)} pairs; row 5 / this "
                     f"{r99 / median(m99):.2f}x", cells, "(info)", None))
    targets.append(("isolation p99 with/alone", r99, 1.2, "max"))
    targets.append(("isolation tail hit ratio", hr, 0.99, "min"))
    # 6 rate accuracy
    parts, ok = [], True
    for rt, es in rate.items():
        acc = [e["accuracy"] for e in es]
        ok = ok and all(abs(a - 1) <= 0.05 for a in acc)
        parts.append(f"{rt}: " + " ".join(f"{a:.3f}x" for a in acc))
        worst = max(acc, key=lambda a: abs(a - 1))
        targets.append((f"lagging rate {rt} accuracy", worst, (0.95, 1.05), "band"))
    rows.append(("6. lagging rate accuracy (bytes at server / time, burst subtracted) / "
                 "configured rate", "; ".join(parts), {k: ("n/a", None) for k in cols},
                 "within ±5%", ok))
    # 7 peak RSS
    th = [h for h in b.hwm if h["cache_bytes"]]
    worst = max(th, key=lambda h: h["vm_hwm"] - h["cache_bytes"])
    over = max(h["vm_hwm"] / (h["cache_bytes"] + 64 * MiB) for h in th)
    cells = {k: ("n/a", None) for k in cols}
    for k in cols:
        # scenario 10's ls -l of many keys is a row of its own
        hs = [h["vm_hwm"] for h in b.hwm if h["system"] == k
              and not h.get("note", "").startswith("scenario 10 (ls")]
        if hs:
            cells[k] = (f"{max(hs) / MiB:.0f} MiB (own cache settings)", None)
    rows.append(("7. peak RSS (VmHWM), worst tierfs mount vs hot_size + lagging_size",
                 f"{worst['vm_hwm'] / MiB:.0f} MiB for {worst['cache_bytes'] / MiB:.0f} MiB of "
                 f"cache (+{(worst['vm_hwm'] - worst['cache_bytes']) / MiB:.0f} MiB)", cells,
                 "<= caches + 64 MiB (every mount)", over <= 1.0))
    targets.append(("peak RSS / (caches + 64M)", over, 1.0, "max"))
    # 8 peak RSS under 64 cold readers
    mem = b.raw["runs"].get("memory")
    if mem:
        r = mem["vm_hwm"] / mem["bound"]
        rows.append(("8. peak RSS (VmHWM), 64 threads reading 64 cold objects at once "
                     "(block_size 4M, hot_size 32M, lagging off, max_conns 64)",
                     f"{mem['vm_hwm'] / MiB:.0f} MiB", {k: ("n/a", None) for k in cols},
                     "<= hot_size + 64 MiB (96 MiB)", r <= 1.0))
        targets.append(("peak RSS 64 cold readers / (hot_size + 64M)", r, 1.0, "max"))
    br, bt = broker_report(b, cols)
    mr, mt = meta_report(b, cols)
    lr, lt = lagrand_report(b, cols)
    dr, dt = disk_report(b, cols)
    return cols, rows + br + mr + lr + dr, targets + bt + mt + lt + dt


def rand_cell(r):
    """A rand_reads result as a table cell: IOPS (p50/p99 ms); KiB fetched per read."""
    return (f"{r['iops']:.0f} IOPS ({r['lat_us']['p50'] / 1000:.1f}/"
            f"{r['lat_us']['p99'] / 1000:.1f}); {fmt_num(r['kib_per_read'])} KiB")


def lagrand_report(b, cols):
    """Rows and targets of scenario 11 (none if it did not run)."""
    r = b.raw["runs"].get("lagrand")
    if not r:
        return [], []
    ratio = r["iops"] / r["whole_block_iops"]
    kib = r["kib_per_read"]
    targets = [("lagging random 4K: KiB fetched per read", kib, 64, "max"),
               ("lagging random 4K IOPS / whole-block ceiling", ratio, 10, "min")]
    ok = all(v is not None and target_ok(v, lim, k) for _, v, lim, k in targets)
    rows = [(f"11. 4 KiB random O_DIRECT reads of a cold lagging object, 4 threads, "
             f"lagging_rate {r['rate']}, block_size 4M: IOPS (p50/p99 ms), KiB fetched per read",
             rand_cell(r),
             {k: ("n/a", None) for k in cols},
             f">= 10x the whole-block ceiling ({r['whole_block_iops']:.1f} IOPS: rate / block), "
             f"<= 64 KiB per read", ok)]
    h = r.get("hot")
    if h:
        hk, x = h["kib_per_read"], h["size"] / h["hot_size"]
        targets.append((f"hot random 4K, object {x:g}x the tier: KiB fetched per read", hk, 64,
                        "max"))
        rows.append((f"11b. the same reads of the same {h['size'] / MiB:.0f} MiB object read as "
                     f"hot (lagging=off) through a {h['hot_size'] / MiB:.0f} MiB hot tier "
                     f"({x:g}x the tier; <= 1x would keep whole blocks)",
                     rand_cell(h),
                     {k: ("n/a", None) for k in cols}, "<= 64 KiB per read",
                     hk is not None and target_ok(hk, 64, "max")))
    return rows, targets


def broker_report(b, cols):
    """Rows and targets of scenario 9, one row per backend (none if it did not run)."""
    rows, targets = [], []
    for backend, r in (b.raw["runs"].get("broker") or {}).items():
        p = r["params"]
        fb_lim = p["negative_ttl"] + 2
        a, w = r["tail_p99_alone_ms"], r["tail_p99_replay_ms"]
        w_lim = max(3 * a, a + 100) if a is not None else None
        hr, spb = r["hot_hit_ratio"], r["server_per_byte"]
        checks = [
            (f"broker {backend}: segments read right / uploaded",
             (r["segments_read"] / r["segments_uploaded"]
              if r["segments_uploaded"] and not r["n_errors"] else 0.0), 1.0, "min"),
            (f"broker {backend}: upload->first byte p99 s", r["first_byte_p99_s"], fb_lim,
             "max"),
            (f"broker {backend}: tail p99 during replay ms", w, w_lim, "max"),
            (f"broker {backend}: follower hot hit ratio", hr, 0.9, "min"),
            (f"broker {backend}: lagging server bytes / byte read", spb, 32, "max"),
        ]
        ok = all(lim is not None and target_ok(v, lim, k) for _, v, lim, k in checks)
        targets += checks
        rows.append((
            f"9. broker on {backend}: {r['segments_uploaded']} segments of "
            f"{p['seg_size'] // MiB} MiB every {p['interval']:g} s; upload->first byte "
            f"p50/p99; tail read p50/p99 alone / during replay; follower hot hit ratio; "
            f"lagging consumer ({r['lagging_ops']} index lookups + {p['lag_read'] // 1024} KiB "
            f"reads): bytes at the server per byte read",
            f"{r['segments_read']} read, {r['n_errors']} byte errors; "
            f"{fmt_num(r['first_byte_p50_s'])}/{fmt_num(r['first_byte_p99_s'])} s; "
            f"{fmt_num(r['tail_p50_alone_ms'])}/{fmt_num(a)} ms / "
            f"{fmt_num(r['tail_p50_replay_ms'])}/{fmt_num(w)} ms; "
            f"{'n/a' if hr is None else f'{100 * hr:.2f}%'}; {fmt_num(spb)}x",
            {k: ("n/a", None) for k in cols},
            f"every byte right, p99 first byte <= {fb_lim:g} s, replay p99 <= max(3x, +100 ms), "
            f"hit ratio >= 90%, <= 32x (parts of 64 KiB for 8 KiB reads: 8x at best)", ok))
    return rows, targets


def meta_report(b, cols):
    """Rows and targets of scenario 10 (none if it did not run)."""
    meta = b.raw["runs"].get("meta")
    if not meta:
        return [], []
    rows, targets = [], []
    na = {k: ("n/a", None) for k in cols}

    def failed(part):
        return f"**failed**: {meta[part]['error'][-200:]}"

    # 10a upload -> first byte by name (a part left out by meta_parts has no row)
    fb = meta.get("first_byte")
    lim = 1 + 0.5  # tierfs's default negative_ttl + 0.5 s (issue 8)
    if fb is None:
        pass
    elif "error" in fb:
        rows.append(("10a. upload -> first byte by name", failed("first_byte"), na,
                     f"tierfs p99 <= negative_ttl + 0.5 s ({lim:g} s)", False))
        targets.append(("meta: upload->first byte p99 s (tierfs-s3)", None, lim, "max"))
    else:
        def fbcell(s):
            r = fb["systems"][s]
            return (f"p50/p99 {fmt_num(r['p50'])}/{fmt_num(r['p99'])} s"
                    + (f", **{r['missed']} of {r['uploads']} not seen in "
                       f"{fb['deadline_s']} s**" if r["missed"] else "")
                    + f" ({fb['opts'][s]})")
        cells = dict(na)
        for s in ("s3fs", "rclone"):
            if s in fb["systems"] and s in cells:
                cells[s] = (fbcell(s), None)
        t = fb["systems"].get("tierfs-s3")
        v = t["p99"] if t and not t["missed"] else None
        rows.append((
            f"10a. upload -> first byte by name: a writer PUTs {t['uploads'] if t else '?'} new "
            f"{fb['size'] // 1024} KiB objects to s3rver one at a time, a reader per mount "
            f"(all at once) polls open(name) + read(1) every {fb['poll_s'] * 1000:g} ms from a "
            f"random 0-1.5 s before the PUT; time from the PUT's answer to the first byte",
            fbcell("tierfs-s3") if t else "n/a", cells,
            f"tierfs p99 <= negative_ttl + 0.5 s ({lim:g} s), none missed",
            v is not None and v <= lim))
        targets.append(("meta: upload->first byte p99 s (tierfs-s3)", v, lim, "max"))
    # 10b ls -l of many keys
    ls = meta.get("ls")
    if ls is None:
        pass
    elif "error" in ls:
        rows.append(("10b. ls -l of one prefix of many keys", failed("ls"), na, "(info)", False))
    else:
        n = ls["keys"]

        def lscell(s):
            ok = [r for r in ls["systems"][s] if "error" not in r]
            bad = len(ls["systems"][s]) - len(ok)
            if not ok:
                return "**failed**: " + ls["systems"][s][-1]["error"][-200:]
            rise = median([r["vm_hwm"] - r["idle_hwm"] for r in ok])
            return (f"{cell([r['seconds'] for r in ok], ' s')}, VmHWM "
                    f"{fmt_num(median([r['vm_hwm'] for r in ok]) / MiB)} MiB (+"
                    f"{fmt_num(rise / MiB)} MiB = {rise / n:.0f} B/key over the idle mount)"
                    + (f"; {bad} runs failed" if bad else ""))
        cells = dict(na)
        for s in ("rclone", "httpdirfs"):
            if s in ls["systems"] and s in cells:
                cells[s] = (lscell(s), None)
        if "s3fs" in cells:
            cells["s3fs"] = (f"absent: S3 only, and s3rver takes {ls['s3rver_put_per_s']:.0f} "
                             f"PUT/s (8 threads), {n / ls['s3rver_put_per_s'] / 60:.0f} min for "
                             f"{n} keys", None)
        rows.append((
            f"10b. `ls -l` of {n} keys (1-byte files) in one prefix, http backend (nginx; "
            f"tierfs: JSON index, defaults; rclone `:http:` defaults (a HEAD per file for its "
            f"size); httpdirfs `--cache`): drop_caches, fresh mount, time of `ls -l` "
            f"(median of {ls['runs']} interleaved runs) and the process's VmHWM after it",
            lscell("tierfs"), cells, "(info)", None))
    # 10c lookups while the store hangs
    h = meta.get("hang")
    hl = 100
    if h is None:
        pass
    elif "error" in h:
        rows.append(("10c. stats and cached reads while the store hangs", failed("hang"), na,
                     f"p99 <= {hl} ms", False))
        targets.append(("meta: hung store, stat / cached read p99 ms", None, hl, "max"))
    else:
        v = max(h["stat_ms"]["p99"], h["read_ms"]["p99"])
        inflight = h["stalled_at_start"] == 32 and h["stalled_at_end"] == 32
        u = h["unknown"]
        rows.append((
            f"10c. tierfs behind faultproxy (nginx, `timeout={h['opts']['timeout']},retries=0,"
            f"max_conns=32,metadata_ttl=600`), directories listed and a 16 MiB object read; then "
            f"every request stalls and 32 lookups of unknown names wait on it; meanwhile "
            f"{h['ops']} stats of known names (dentries dropped) and {h['ops']} 4 KiB O_DIRECT "
            f"reads of cached blocks, one at a time: p50/p99",
            f"stat {fmt_num(h['stat_ms']['p50'])}/{fmt_num(h['stat_ms']['p99'])} ms, read "
            f"{fmt_num(h['read_ms']['p50'])}/{fmt_num(h['read_ms']['p99'])} ms; "
            f"{h['stalled_at_start']} / {h['stalled_at_end']} lookups stalled at the start / "
            f"end; unknown names: {', '.join(u['errnos'])} after {fmt_num(u['min_s'])}-"
            f"{fmt_num(u['max_s'])} s; the same stats from the kernel's dentries p50 "
            f"{fmt_num(h['stat_again_ms']['p50'])} ms; reads "
            + (f"**INVALID: {h['check']}**" if h["check"] else "all served by tierfs, none "
               "fetched"), na,
            f"p99 <= {hl} ms with 32 lookups in flight", inflight and v <= hl
            and not h["check"]))
        targets.append(("meta: hung store, stat / cached read p99 ms", v, hl, "max"))
        targets.append(("meta: hung store, lookups in flight during the ops (of 32)",
                        min(h["stalled_at_start"], h["stalled_at_end"]), 32, "min"))
    hang_stale_report(meta.get("hang_stale"), na, hl, rows, targets)
    return rows, targets


def hang_stale_report(h, na, hl, rows, targets):
    """Row 10c (stale) into @rows and @targets: each operation's p99 against @hl ms."""
    kinds = (("stat", "stat of a known name"), ("ls", "ls of a known directory"),
             ("cat_stats", "cat .tierfs/stats"), ("open_read", "open + 4 KiB read + close"))
    name = "meta: hung store past metadata_ttl, worst p99 ms (stat, ls, cat stats, open+read)"
    if h is None:
        return
    if "error" in h:
        rows.append(("10c (stale). stat, ls, cat stats, open+read while the store hangs past "
                     "metadata_ttl", f"**failed**: {h['error'][-200:]}", na,
                     f"each p99 <= {hl} ms", False))
        targets.append((name, None, hl, "max"))
        return
    v = None if h["stuck"] else max(h[k + "_ms"]["p99"] for k, _ in kinds)
    u = h["unknown"]
    rows.append((
        f"10c (stale). The same with `metadata_ttl=1`: listed, the object read, 1.5 s for "
        f"everything to go stale, then every request stalls (longer than metadata_ttl) and "
        f"32 lookups of unknown names wait on it; meanwhile {h['rounds']} rounds over "
        f"{fmt_num(h['hang_s'])} s of the hang, one operation at a time: p50/p99/max",
        "; ".join(f"{d} {fmt_num(h[k + '_ms']['p50'])}/{fmt_num(h[k + '_ms']['p99'])}/"
                  f"{fmt_num(h[k + '_ms']['max'])} ms" for k, d in kinds)
        + (f"; **STUCK: {h['stuck']}**" if h["stuck"] else "")
        + f"; {h['stalled_at_start']} / {h['stalled_at_end']} refreshes stalled at the start "
          f"/ end; unknown names: {', '.join(u['errnos'])} within "
          f"{fmt_num(u['after_back_s'])} s of the store's return; reads "
        + (f"**INVALID: {h['check']}**" if h["check"] else "all served by tierfs, none "
           "fetched"), na,
        f"each p99 <= {hl} ms with 32 lookups in flight", v is not None and v <= hl
        and not h["check"] and h["stalled_at_end"] >= 32))
    targets.append((name, v, hl, "max"))


def disk_report(b, cols):
    """Rows and targets of scenario disk (none for a part that did not run or failed: the
    notes say why)."""
    rows, targets = [], []
    res = {k: v for k, v in (b.raw["runs"].get("disk") or {}).items() if "error" not in v}
    none = {k: ("n/a", None) for k in cols}
    hit = res.get("hit")
    for mode, m in ((hit or {}).get("modes") or {}).items():
        r, ceil = median(m["ratio"]), median(m["ceiling"])
        direct = mode == "direct"
        rows.append((
            f"disk hit, {'O_DIRECT' if direct else 'buffered'} reads on both sides: seq.bin "
            f"({hit['size'] // MiB} MiB) with every block on disk and none in memory (a fresh "
            f"mount, prefault=on), page cache dropped, 1 MiB preads, MB/s; in parentheses the "
            f"same bytes read from a local file on the same disk (written in the same minute as "
            f"the disk tier), and the same mount reading "
            f"them again from its memory tier (the most a disk hit can reach through FUSE)"
            + ("" if hit["same_device"] else " (NOT the same device)")
            + (f"; {len(hit['invalid'])} invalid runs" if hit["invalid"] else ""),
            f"{cell(m['disk'], ' MB/s')} (local file {cell(m['local'], ' MB/s')}; "
            f"ratio {fmt_num(r)}; memory hit {cell(m['memory'], ' MB/s')}, "
            f"{fmt_num(ceil)}x the local file)", none,
            ">= 0.8x the local file" if direct else
            "(info: buffered FUSE reads are capped by the memory-hit figure)",
            (r is not None and r >= 0.8) if direct else None))
        if direct:
            targets.append(("disk hit / local file, O_DIRECT (MB/s)", r, 0.8, "min"))
    rec = res.get("recovery")
    if rec:
        a = median(rec["answer_s"])
        gib = rec["size"] / GiB
        rows.append((
            f"recovery at mount: a cache_dir of {gib:.0f} GiB "
            f"({fmt_num(median(rec['blocks']))} records of 4 MiB), page cache dropped: tierfs "
            f"started -> first answer of the mount; the scan alone",
            f"{cell(rec['answer_s'], ' s')}; scan {cell(rec['scan_ms'], ' ms')}", none,
            f"<= 2 s (the issue's bound for 10 GiB; {gib:.0f} GiB filled here)",
            a is not None and a <= 2.0))
        targets.append((f"recovery of {gib:.0f} GiB: mount to first answer s", a, 2.0, "max"))
    rs = res.get("restart")
    if rs and "tierfs" in rs:
        t = rs["tierfs"]

        def c(x):
            return f"{x['fetched'] / MiB:.1f} MiB, {x['seconds']:.2f} s"

        cells = {k: (c(rs[k]), None) if k in rs else ("n/a", None) for k in cols}
        frac = t["fetched"] / t["size"]
        rows.append((
            f"warm restart: seq.bin ({t['size'] // MiB} MiB) read, clean unmount, page cache "
            f"dropped, mounted again on the same cache: bytes of it fetched from the store and "
            f"time from the mount's start to the last byte (s3fs use_cache, rclone "
            f"--vfs-cache-mode full)", c(t), cells, "<= 1% of the working set fetched",
            frac <= 0.01))
        targets.append(("warm restart: fetched / working set", frac, 0.01, "max"))
    return rows, targets


def write_report(b, cols):
    """Rows and targets of scenario write (none for a part that did not run or failed: the
    notes say why). A peer that could not run is SKIPPED, with why, never a figure."""
    rows, targets = [], []
    res = {k: v for k, v in (b.raw["runs"].get("write") or {}).items() if "error" not in v}
    none = {k: ("n/a", None) for k in cols}
    w = res.get("seq")
    if w:
        mb, mib = w["mbps"], w["size"] // MiB
        for bs in (str(MiB), str(8 * 1024)):
            bl = "1 MiB" if bs == str(MiB) else "8 KiB"
            t = mb["tierfs-s3"][bs]
            cells, met, skip = dict(none), [], []
            for peer, lim in (("s3fs", 1.2), ("rclone", 1.5)):
                v = mb.get(peer, {}).get(bs) or []
                r = per_run_ratio(t, v) if v else None
                if r is None:
                    skip.append(f"{peer} SKIPPED: {w['skipped'].get(peer, 'no figure')}")
                    continue
                cells[peer] = (cell(v, " MB/s"), r)
                met.append(r >= lim)
                targets.append((f"write {mib} MiB, {bl} writes, to s3rver: tierfs / {peer}", r,
                                lim, "min"))
            busy = []
            for s in ("tierfs-s3", "s3fs", "rclone"):
                cs = w["cpu"].get(s, {}).get(bs)
                if cs:
                    busy.append(f"{s} {fmt_num(median([c.get('s3rver') for c in cs]))}/"
                                f"{fmt_num(median([c.get('fs') for c in cs]))}")
            busy = "; ".join(busy)
            rows.append((
                f"W1. sequential write of a {mib} MiB file to s3rver through the mount, {bl} "
                f"writes, MB/s from open() to close()'s return (rclone: to the object's arrival, "
                f"it uploads after close); each object checked whole in the store (HEAD); "
                f"tierfs defaults (part_size 8M) + allow_write; in parentheses the CPU s/s of "
                f"s3rver / of the mount's process during each system's writes",
                f"{cell(t, ' MB/s')} ({busy}); s3rver's ceiling, botocore multipart 8 MiB "
                f"parts 4 in flight: {cell(w.get('ceiling') or [], ' MB/s')}, tierfs "
                f"{fmt_num(per_run_ratio(t, w.get('ceiling') or []))}x of it", cells,
                ">= 1.2x s3fs, >= 1.5x rclone" + (f" ({'; '.join(skip)})" if skip else ""),
                all(met) if met else None))
            tf, lo = mb["tierfs-file"][bs], mb["local"][bs]
            r = per_run_ratio(tf, lo)
            lim = Bench.WRITE_FILE_TARGET
            rows.append((
                f"W1 file://. the same {mib} MiB, {bl} writes, through a file:// mount (tierfs "
                f"fsyncs and renames at close), against the same loop writing a local file on "
                f"the same filesystem + fsync: MB/s", f"{cell(tf, ' MB/s')} (local "
                f"{cell(lo, ' MB/s')}; ratio {fmt_num(r)})", none, f">= {lim}x the local file",
                r is not None and r >= lim))
            targets.append((f"write {mib} MiB, {bl} writes, file://: tierfs / local", r, lim,
                            "min"))
    rb = res.get("readback")
    if rb:
        size, mib = rb["size"], rb["size"] // MiB
        for part, lim, what in (("a", 0.02, "this mount right after close"),
                                ("b", 0.10, "a second mount sharing Redis, once the writer's "
                                 "blocks were put")):
            e = rb.get(part)
            if not e:
                continue
            frac = e["fetched"] / size
            wr = rb.get("writer") if part == "b" else None
            rows.append((
                f"W2{part}. the written object ({mib} MiB, 1 MiB writes) read back after "
                f"drop_caches, {what}: bytes fetched from the store "
                f"(tierfs_backend_received_bytes_total) / object; sha256 of the bytes read",
                f"{e['fetched'] / MiB:.2f} MiB = {100 * frac:.2f}%, sha256 "
                + ("right" if e["ok"] else "**WRONG**")
                + (f"; the writer put {wr['shared_puts_total']:.0f} of {rb['blocks']} blocks "
                   f"into Redis, dropped {wr['shared_put_drops_total']:.0f}, "
                   f"{wr['shared_put_queued_bytes'] / MiB:.1f} MiB still queued" if wr else ""),
                none, f"<= {100 * lim:g}%",
                frac <= lim and e["ok"]))
            targets.append((f"written object read back, {what.split(',')[0]}: fetched / object",
                            frac if e["ok"] else None, lim, "max"))
    rs = res.get("rss")
    if rs:
        r = rs["vm_hwm"] / rs["bound"]
        rows.append((
            f"W3. peak RSS (VmHWM) of tierfs while 4 files of {rs['size'] // MiB} MiB are "
            f"written at once (1 MiB writes, defaults + allow_write), against hot_size + "
            f"lagging_size + 64 MiB + write_buffer", f"{rs['vm_hwm'] / MiB:.0f} MiB of "
            f"{rs['bound'] / MiB:.0f} MiB (memory_bound_bytes "
            f"{fmt_num((rs['bound_stat'] or 0) / MiB)} MiB); {rs['mbps']:.0f} MB/s together, "
            f"{fmt_num(rs['waits'])} buffer waits", none, "<= the bound", r <= 1.0))
        targets.append(("peak RSS 4 concurrent writes / bound", r, 1.0, "max"))
    return rows, targets


def mac_report(b, cols):
    """Row and target of scenario 12c (none if it did not run): rounds where a block missed
    Redis do not count."""
    r = b.raw["runs"].get("mac")
    if not r:
        return [], []
    ok = {k: [e["mbps"] for e in r[k] if e["hits"] == e["blocks"]] for k in ("plain", "keyed")}
    ratio = (median(ok["keyed"]) / median(ok["plain"])
             if ok["keyed"] and ok["plain"] else None)
    row = (f"12c. shared hit: a fresh mount reads {r['bytes'] // MiB} MiB of new objects, every "
           f"block from Redis: MiB/s without / with shared_key (the MAC); rounds interleaved",
           f"{cell(ok['plain'])} / {cell(ok['keyed'])} = {fmt_num(ratio)}x",
           {k: ("n/a", None) for k in cols}, ">= 0.8x", ratio is not None and ratio >= 0.8)
    return [row], [("shared hit with the MAC / without", ratio, 0.8, "min")]


def shared_report(b, cols):
    """Rows and targets of scenarios 12, 12c and 13 (none if they did not run)."""
    rows, targets = mac_report(b, cols)
    r = b.raw["runs"].get("shared")
    if not r:
        return rows, targets
    f = r["fetch"]

    def one(key):
        runs = f.get(key) or []
        return (cell([e["server_per_byte"] for e in runs], "x"),
                cell([e["p99_ms"] for e in runs], " ms"),
                median([e["timeouts"] for e in runs]))

    for n in (1, 2, 3):
        if f"{n} alone" not in f and f"{n} shared" not in f:
            continue
        (ax, ap, _), (sx, sp, st) = one(f"{n} alone"), one(f"{n} shared")
        spb = median([e["server_per_byte"] for e in f.get(f"{n} shared") or []])
        rows.append((f"12. fleet: {n} mount{'s' if n > 1 else ''} read the same "
                     f"{r['hot_bytes'] // MiB} MiB of new objects at once: bytes at the server "
                     f"per byte of the objects; p99 of 1 MiB reads; alone / shared",
                     f"{ax}; {ap} / {sx}; {sp} ({fmt_num(st)} Redis timeouts)",
                     {k: ("n/a", None) for k in cols}, "shared <= 1.1x", spb is not None
                     and spb <= 1.1))
        targets.append((f"fleet of {n}, shared: server bytes / object bytes", spb, 1.1, "max"))
    paced = f.get("3 shared paced")
    if paced:
        (sx, sp, st), spb = one("3 shared paced"), median([e["server_per_byte"] for e in paced])
        rows.append((f"12b. fleet: 3 mounts tail the same objects, each reader paced at "
                     f"{b.p['shared_pace']}/s (a broker's rate, not full speed), shared: bytes "
                     f"at the server per byte; p99 of 1 MiB reads",
                     f"{sx}; {sp} ({fmt_num(st)} Redis timeouts)",
                     {k: ("n/a", None) for k in cols}, "<= 1.1x", spb is not None
                     and spb <= 1.1))
        targets.append(("fleet of 3 paced, shared: server bytes / object bytes", spb, 1.1,
                        "max"))
    acc = [e["accuracy"] for e in r["fleet"]]
    if not acc:
        return rows, targets
    a = median(acc)
    rows.append((f"13. fleet_lagging_rate={b.p['fleet_rate']} over 3 replaying mounts: bytes/s "
                 f"at the server / the rate (slope past the first second); Redis calls",
                 f"{cell(acc)}; {fmt_num(median([e['calls'] for e in r['fleet']]))} calls",
                 {k: ("n/a", None) for k in cols}, "0.95-1.05",
                 a is not None and 0.95 <= a <= 1.05))
    targets.append(("fleet lagging rate accuracy", a, (0.95, 1.05), "band"))
    return rows, targets


def sim_report(b, cols):
    """Rows and targets of scenarios trace and sim (none for one that did not run)."""
    rows, targets = [], []
    t = b.raw["runs"].get("trace")
    if t:
        for w, unit, what in (("seq", " MB/s", "1 MiB sequential"),
                              ("rand", " IOPS", "4 KiB O_DIRECT random")):
            ratio = median(t["ratios"][w])
            rows.append((f"trace: cached {what} reads, trace=FILE on / off (interleaved "
                         f"passes; {t['records']:.0f} of {t['reads']:.0f} reads recorded, "
                         f"{t['dropped']:.0f} dropped)",
                         f"{cell(t['res']['on'][w], unit)} / {cell(t['res']['off'][w], unit)} "
                         f"= {cell(t['ratios'][w], 'x')}",
                         {k: ("n/a", None) for k in cols}, ">= 0.95x",
                         ratio is not None and ratio >= 0.95))
            targets.append((f"trace on/off, cached {w} reads", ratio, 0.95, "min"))
        targets.append(("trace: reads dropped", t["dropped"], 0, "max"))
    s = b.raw["runs"].get("sim")
    if s:
        one, fleet = s["one"], s["fleet"]
        rows.append((f"sim: one broker's hour ({one['reads']} reads) replayed on one core",
                     f"{one['reads_per_cpu_s'] / 1e6:.2f}M reads/s",
                     {k: ("n/a", None) for k in cols}, ">= 1M reads/s",
                     one["reads_per_cpu_s"] >= 1e6))
        targets.append(("sim: reads replayed per CPU second", one["reads_per_cpu_s"], 1e6,
                        "min"))
        rows.append((f"sim: {fleet['mounts']} brokers over {fleet['span_s'] / 3600:.1f} h "
                     f"({fleet['reads']} reads) replayed",
                     f"{fleet['wall_s']:.1f} s ({fleet['cpu_s']:.1f} s CPU, "
                     f"{fleet['reads_per_cpu_s'] / 1e6:.2f}M reads/s)",
                     {k: ("n/a", None) for k in cols}, "< 60 s", fleet["wall_s"] < 60))
        targets.append((f"sim: {fleet['mounts']}-mount hour, seconds", fleet["wall_s"], 60,
                        "max"))
    return rows, targets


def write_results(b, cols, rows, targets, machine, elapsed):
    out = b.out
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    lines.append(f"# tierfs benchmark results ({'quick' if b.quick else 'full'} run)")
    lines.append("")
    lines.append(f"Generated by `scripts/bench{' --quick' if b.quick else ''}` on "
                 f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')} in {elapsed:.0f} s. Medians of "
                 f"interleaved runs, [min–max]; in parentheses tierfs's ratio to that column "
                 f"(tierfs / other, the median of the per-run ratios: > 1 is better for throughput "
                 f"and IOPS, < 1 for the fetched-bytes row). Raw data: `results.json`.")
    lines.append("")
    lines.append("| scenario | tierfs | " + " | ".join(
        {"nullfs": "nullfs (ceiling)", "curl": "curl (ceiling)"}.get(c, c) for c in cols)
        + " | target | met |")
    lines.append("|" + "---|" * (len(cols) + 4))
    for name, tcell, cells, target, met in rows:
        cs = []
        for c in cols:
            v, r = cells.get(c, ("n/a", None))
            cs.append(v if r is None else f"{v} ({r:.2f}x)")
        m = "" if met is None else ("**met**" if met else "**MISSED**")
        lines.append(f"| {name} | {tcell} | " + " | ".join(cs) + f" | {target} | {m} |")
    lines.append("")
    lines.append("## Targets")
    lines.append("")
    lines.append("| target | tierfs | limit | met |")
    lines.append("|---|---|---|---|")
    for name, v, lim, kind in targets:
        ok = target_ok(v, lim, kind)
        ls = f"{lim[0]}–{lim[1]}" if kind == "band" else (f">= {lim}" if kind == "min"
                                                          else f"<= {lim}")
        lines.append(f"| {name} | {'n/a' if v is None else f'{v:.3f}'} | {ls} | "
                     f"{'met' if ok else 'MISSED'} |")
    lines.append("")
    lines.append("## How each figure is taken")
    lines.append("")
    p = b.p
    lines += [
        f"- Data: generated incompressible objects on local disk, read once before the runs so "
        f"nginx and s3rver send them from the page cache (read again before every run and "
        f"scenario, as the cached scenarios drop every cache). "
        f"seq.bin {p['seq_size'] // MiB} MiB; hot/ {p['hot_files']} x "
        f"{p['hot_file_size'] // MiB} MiB (mtime now); old/ {p['old_files']} x "
        f"{p['old_file_size'] // MiB} MiB (mtime 30 days ago).",
        f"- Servers on 127.0.0.1: nginx (sendfile, one worker) with a JSON-index listener "
        f"(tierfs, curl), an HTML-index listener (rclone, httpdirfs) and a proxy listener in "
        f"front of s3rver {machine['s3rver']} (tierfs-s3, s3fs, curl-s3), all in one access "
        f"log; bytes at the server are its $body_bytes_sent.",
        f"- tierfs for 1-4: `-o hot_size={size_opt(512 * MiB if b.quick else 2 * GiB)},"
        f"hot_ttl=100000000`, other options default (block_size 4M, readahead 2). nullfs: "
        f"bench/nullfs.c, the same FUSE flags as tierfs (low level, 16 workers, max_write and "
        f"max_readahead 1 MiB, read_ahead_kb 1024, keep_cache), replying from an in-memory arena.",
        "- Peers: s3fs `use_cache=DIR` against s3rver (through the proxy), rclone mount "
        "`:http: --vfs-cache-mode full --read-only`, httpdirfs `--cache`; every run with an "
        "empty cache directory and a fresh mount.",
        f"- Runs interleave systems (run 1: every system, run 2: every system, ...): "
        f"{p['runs']} runs for 1-3, {p['multi_runs']} for 4, {p['iso_pairs']} alone/replay "
        f"pairs for 5, {p['rate_runs']} per rate for 6.",
        "- 1: fresh mount, `preader seq` (1 MiB preads, one thread, start to end); curl: one GET "
        "to /dev/null, size / time_total.",
        "- 2: the same mount right after 1: `echo 3 > /proc/sys/vm/drop_caches` (page cache, "
        "dentries and inodes, for every system alike) before each pass, then the same "
        "sequential read; the figure is the filesystem's own cache. For tierfs each pass is "
        "checked in .tierfs/stats: read_bytes_total grew by the object size and no fetch "
        "counter grew; a run with a pass that fails the check is reported INVALID, not as a "
        "figure. Not a fresh mount. 2b: one more pass with posix_fadvise(DONTNEED) only "
        "(the old method), for comparison.",
        f"- 3: the same mount after 2: `preader rand --direct` 4 KiB O_DIRECT preads at random "
        f"aligned offsets over the whole object, one thread, {p['rand_seconds']} s in 0.5 s "
        f"slices, drop_caches before each slice and the same stats check (no fetch).",
        "- 4: fresh mount; 16 threads read the whole object with 1 MiB preads, thread i starting "
        "at i/16 of it and wrapping (page cache on, as brokers read); server bytes for the object "
        "/ object size.",
        f"- 5: one tierfs mount `hot_size={size_opt(p['iso_hot_size'])},lagging_size="
        f"{size_opt(p['iso_lagging_size'])},lagging_rate={p['iso_rate']},hot_ttl=3600`; the hot "
        f"set read once; 2 threads replay old/ in a loop (lagging tier, direct_io), and the tail "
        f"reader does {p['iso_slice']} s slices of 4 KiB O_DIRECT random re-reads of the hot "
        f"set, alternately with the replay paused (its readers wait before their next read) and running, {p['iso_pairs']} "
        f"pairs. p99 ratio = median over pairs of p99 with replay / p99 alone. Hit ratio = hot "
        f"hits / (hits + misses) in the stats over the with-replay slices. Replay volume = "
        f"lagging bytes fetched / (hot_size + lagging_size).",
        f"- 6: fresh mount per run, `lagging_rate=R` (burst 2R), 4 threads read old/ for "
        f"{p['rate_seconds']} s. From the access log: (bytes of all range GETs started up to "
        f"the last start in the window - burst) / (that start - the first start), over R. "
        f"results.json also has a least-squares slope past the burst.",
        "- 7: VmHWM of every tierfs mount just before unmounting, against its hot_size + "
        "lagging_size (the arena is prefaulted at mount).",
        f"- 10a: bucket on s3rver (mounts through the proxy); per upload a reader thread per "
        f"mount polls open(name) + read(1) with a {p['meta_poll'] * 1000:g} ms sleep between "
        f"attempts, the PUT (botocore, straight to s3rver) starts a random 0-1.5 s after the "
        f"readers, and the time counts from its answer (a read before the answer counts 0). "
        f"{p['meta_uploads']} uploads. Peers: s3fs `{META_S3FS_OPTS}`, rclone mount `:s3:` "
        f"`{META_RCLONE_OPTS}`; tierfs defaults.",
        f"- 10b: {p['meta_keys']} 1-byte files in one directory under nginx's root; per run "
        f"and system: `echo 3 > drop_caches`, the source directory stat'ed again, a fresh "
        f"mount of the root, `LC_ALL=C ls -l DIR` timed, VmHWM after it (and VmHWM right after "
        f"mounting, for the rise); {p['meta_ls_runs']} interleaved runs, a system over "
        f"{p['meta_ls_timeout']} s is given up.",
        f"- 10c: `timeout={p['meta_hang_timeout']},retries=0,max_conns=32,metadata_ttl=600`; "
        f"directories k/ ({p['meta_hang_ops']} names) and u/00-u/31 listed and held open (so "
        f"dropping the kernel's dentries does not make tierfs forget their listings), a 16 MiB "
        f"object read with O_DIRECT; then drop_caches, every request stalls at the proxy, a "
        f"stat of u/NN/unknown in each of 32 threads, and, one at a time, a stat of each k/ "
        f"name and a 4 KiB O_DIRECT pread of the cached object; .tierfs/stats must show the "
        f"reads served and nothing fetched.",
        f"- 10c (stale): the same tree, `timeout={p['meta_hang_timeout']},retries=0,"
        f"max_conns=32,metadata_ttl=1`; k/ and u/00-u/31 listed and the object read, then "
        f"1.5 s so that every name, listing and version is past metadata_ttl (the kernel's "
        f"entries too: each stat is a LOOKUP); every request stalls at the proxy until the "
        f"end, a stat of u/NN/unknown in each of 32 threads (they wait for the stalled "
        f"refreshes), and {p['meta_hang_stale_ops']} rounds of: stat of a k/ name, ls u/NN, "
        f"cat .tierfs/stats, open + 4 KiB O_DIRECT pread + close of the object, spread over "
        f"{p['meta_hang_stale_seconds']:g} s at least. An operation over 2 s stops the rounds "
        f"(STUCK).",
    ]
    lines.append("")
    lines.append("## Machine")
    lines.append("")
    for k, v in machine.items():
        lines.append(f"- {k}: {v}")
    lines.append("")
    if b.notes:
        lines.append("## Notes")
        lines.append("")
        lines += [f"- {n}" for n in b.notes]
        lines.append("")
    (out / "results.md").write_text("\n".join(lines))
    b.raw["machine"] = machine
    b.raw["elapsed_s"] = elapsed
    b.raw["hwm"] = b.hwm
    b.raw["targets"] = [{"name": n, "value": v, "limit": lim, "kind": k}
                        for n, v, lim, k in targets]
    b.raw["table"] = [{"scenario": r[0], "tierfs": r[1], "cells": r[2], "target": r[3],
                       "met": r[4]} for r in rows]
    (out / "results.json").write_text(json.dumps(b.raw, indent=1, default=str))
    return "\n".join(lines)


def draw_chart(b, targets, seq):
    """results.png: left, figures of every system per scenario; right, each target as the
    measured value over its limit (bars at or past 1 meet it)."""
    out = b.out
    d = b.run_dir / "chart"
    d.mkdir(exist_ok=True)
    systems = [s for s in ["tierfs", "tierfs-s3", "nullfs", "curl", "curl-s3", "s3fs", "rclone",
                           "httpdirfs"] if s in seq]
    with open(d / "seq.dat", "w") as f:
        f.write("# system cold cached iops_k\n")
        for s in systems:
            cold = summarize(seq[s]["cold"])[0] or 0
            cached = summarize(seq[s]["cached"])[0] or 0
            iops = summarize([r["iops"] for r in seq[s]["rand"] if r])[0] or 0
            f.write(f"{s} {cold:.1f} {cached:.1f} {iops / 1000:.2f}\n")
    with open(d / "targets.dat", "w") as f:
        f.write("# target score\n")
        for name, v, lim, kind in targets:
            if v is None:
                sc = 0
            elif kind == "min":
                sc = v / lim
            elif kind == "max":
                sc = lim / v if v else 0
            else:  # band: 1 at the edge, more inside
                sc = 0.05 / max(abs(v - 1), 1e-3)
                sc = min(sc, 2.0)
            f.write(f"\"{name}\" {min(sc, 3.0):.3f}\n")
    gp = f"""
set terminal pngcairo size 1500,620 font "sans,10"
set output "{out / 'results.png'}"
set multiplot layout 1,2 title "tierfs benchmark ({'quick' if b.quick else 'full'}), medians of interleaved runs"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set key outside top center horizontal
set grid ytics
set bmargin 10
set rmargin 12
set xtics rotate by -30 scale 0
set ylabel "MB/s (sequential) / kIOPS (4 KiB random)"
set title "1-3: sequential MB/s, 4 KiB random kIOPS x100"
plot "{d / 'seq.dat'}" using 2:xtic(1) title "1 cold seq MB/s", \\
     "" using 3 title "2 cached seq MB/s", \\
     "" using ($4*100) title "3 random kIOPS x100"
set title "targets: measured / limit (>= 1 met; rate: 1 at +-5%)"
set ylabel "score"
set yrange [0:3.3]
set xtics rotate by -40
unset key
set style histogram clustered gap 1
plot "{d / 'targets.dat'}" using 2:xtic(1) title "score" lc rgb "#3a7dc9", \\
     "" using 0:2:(sprintf("%.2f", $2)) with labels offset 0,0.8 notitle, \\
     1 with lines lw 2 lc rgb "red" notitle
unset multiplot
"""
    (d / "chart.gp").write_text(gp)
    r = subprocess.run(["gnuplot", str(d / "chart.gp")], capture_output=True, text=True)
    if r.returncode != 0:
        log(f"gnuplot failed: {r.stderr[-1000:]}")


def main():
    global TIERFS, NULLFS, PREADER, DISKFILL, SIM
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--peers", dest="peers", action="store_true", default=None)
    ap.add_argument("--no-peers", dest="peers", action="store_false")
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--only", default="",
                    help="comma list of scenarios: seq,multi,iso,rate,mem,broker,meta,lagrand,"
                    "disk,shared,mac,trace,sim,write")
    ap.add_argument("--set", action="append", default=[], metavar="PARAM=VALUE",
                    help="override a parameter (see Bench.p), e.g. --set iso_seconds=30")
    ap.add_argument("--chart-only", action="store_true",
                    help="redraw results.png from OUT/results.json, run nothing")
    ap.add_argument("--tierfs", required=True)
    ap.add_argument("--nullfs", required=True)
    ap.add_argument("--preader", required=True)
    ap.add_argument("--diskfill", help="bench/diskfill (default: bench/diskfill beside --tierfs)")
    ap.add_argument("--sim", help="tierfs-sim (default: sim/tierfs-sim beside --tierfs)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    TIERFS, NULLFS, PREADER = Path(args.tierfs), Path(args.nullfs), Path(args.preader)
    DISKFILL = Path(args.diskfill) if args.diskfill else TIERFS.parent / "bench" / "diskfill"
    SIM = Path(args.sim) if args.sim else TIERFS.parent / "sim" / "tierfs-sim"
    if args.chart_only:
        raw = json.loads((Path(args.out) / "results.json").read_text())
        b = argparse.Namespace(out=Path(args.out), run_dir=Path(args.work),
                               quick=raw["params"]["seq_size"] < GiB)
        Path(args.work).mkdir(parents=True, exist_ok=True)
        draw_chart(b, [(t["name"], t["value"], t["limit"], t["kind"]) for t in raw["targets"]],
                   raw["runs"]["seq"])
        return 0
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    atexit.register(cleanup)
    b = Bench(args)
    b.load_start = Path("/proc/loadavg").read_text().split()[:3]
    t0 = time.monotonic()
    only = set(filter(None, args.only.split(",")))
    try:
        b.setup()
        seq = b.scen_seq() if not only or "seq" in only else None
        multi = b.scen_multi() if not only or "multi" in only else None
        iso = b.scen_isolation() if not only or "iso" in only else None
        rate = b.scen_rate() if not only or "rate" in only else None
        if not only or "mem" in only:
            b.scen_memory()
        if not only or "broker" in only:
            b.scen_broker()
        if not only or "meta" in only:
            b.scen_meta()
        if not only or "lagrand" in only:
            b.scen_lagrand()
        if not only or "disk" in only:
            b.scen_disk()
        if not only or "shared" in only:
            b.scen_shared()
        if not only or "mac" in only:
            b.scen_mac()
        if not only or "trace" in only:
            b.scen_trace()
        if not only or "sim" in only:
            b.scen_sim()
        if not only or "write" in only:
            b.scen_write()
    finally:
        cleanup()
    if only:
        print(json.dumps(b.raw["runs"], indent=1, default=str))
        print(json.dumps(b.hwm, indent=1, default=str))
        cr, ct = cold_report(b, seq, ["nullfs", "curl", "s3fs", "rclone", "httpdirfs"]) \
            if seq else ([], [])
        for name, tcell, cells, target, met in cr:  # rows 1-1c
            peers = "; ".join(f"{k} {v} ({fmt_num(r)}x)" for k, (v, r) in cells.items()
                              if v != "n/a")
            print(f"| {name} | {tcell} | {peers or '-'} | {target} | "
                  f"{'met' if met else 'MISSED' if met is not None else ''} |")
        br, bt = broker_report(b, [])
        mr, mt = meta_report(b, ["s3fs", "rclone", "httpdirfs"])
        for name, tcell, _, target, met in br:  # scenario 9's rows, as in the results table
            print(f"| {name} | {tcell} | {target} | {'met' if met else 'MISSED'} |")
        for name, tcell, cells, target, met in mr:  # scenario 10's
            peers = "; ".join(f"{k}: {v}" for k, (v, _) in cells.items() if v != "n/a")
            print(f"| {name} | {tcell} | {peers or 'no peers'} | {target} | "
                  f"{'' if met is None else 'met' if met else 'MISSED'} |")
        lr, lt = lagrand_report(b, [])
        for name, tcell, _, target, met in lr:  # scenario 11's
            print(f"| {name} | {tcell} | {target} | {'met' if met else 'MISSED'} |")
        dr, dt = disk_report(b, ["s3fs", "rclone"])
        for name, tcell, cells, target, met in dr:  # scenario disk's rows
            peers = "; ".join(f"{k} {v}" for k, (v, _) in cells.items() if v != "n/a")
            print(f"| {name} | {tcell} | {peers or '-'} | {target} | "
                  f"{'met' if met else 'MISSED' if met is not None else ''} |")
        sr, st = shared_report(b, [])
        for name, tcell, _, target, met in sr:  # scenarios 12-13's rows
            print(f"| {name} | {tcell} | {target} | {'met' if met else 'MISSED'} |")
        xr, xt = sim_report(b, [])
        for name, tcell, _, target, met in xr:  # scenarios trace and sim
            print(f"| {name} | {tcell} | {target} | {'met' if met else 'MISSED'} |")
        wr, wt = write_report(b, ["s3fs", "rclone"])
        for name, tcell, cells, target, met in wr:  # scenario write's rows
            peers = "; ".join(f"{k} {v} ({fmt_num(r)}x)" for k, (v, r) in cells.items()
                              if v != "n/a")
            print(f"| {name} | {tcell} | {peers or '-'} | {target} | "
                  f"{'SKIPPED' if met is None else 'met' if met else 'MISSED'} |")
        bt += ct + mt + lt + dt + st + xt + wt
        for n in b.notes:
            print(f"note: {n}")
        for name, v, lim, kind in bt:
            print(f"| {name} | {fmt_num(v)} | {kind} {lim if kind == 'band' else fmt_num(lim)} | "
                  f"{'met' if lim is not None and target_ok(v, lim, kind) else 'MISSED'} |")
        # scenarios trace and sim fail the run below their targets
        missed = [name for name, v, lim, kind in xt if not target_ok(v, lim, kind)]
        if missed:
            log(f"targets missed: {', '.join(missed)}")
            return 1
        return 0
    elapsed = time.monotonic() - t0
    cols, rows, targets = build_report(b, seq, multi, iso, rate)
    sr, st = shared_report(b, cols)
    xr, xt = sim_report(b, cols)
    wr, wt = write_report(b, cols)
    rows, targets = rows + sr + xr + wr, targets + st + xt + wt
    text = write_results(b, cols, rows, targets, b.machine(), elapsed)
    draw_chart(b, targets, seq)
    print()
    print(text)
    missed = [t["name"] for t in b.raw["targets"] if not target_ok(t["value"], t["limit"],
                                                                   t["kind"])]
    log(f"finished in {elapsed:.0f}s; targets missed: {', '.join(missed) if missed else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
