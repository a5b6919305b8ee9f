"""What every scenario uses: the run's state and cleanup, processes, the data set, the
servers (nginx, s3rver), mounts, Redis's key events, and the report's number formats."""
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

REPO = Path(__file__).resolve().parents[2]
# the programs the bench runs, set by main from its options
TIERFS = None  # tierfs
NULLFS = None  # bench/nullfs
PREADER = None  # bench/preader
DISKFILL = None  # bench/diskfill
SIM = None  # sim/tierfs-sim
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


def multipart_upload(c, bucket, key, data, part=8 * MiB, inflight=4):
    """botocore client @c uploads @data (bytes-like) as @bucket/@key in one multipart upload of
    @part parts, @inflight of them in flight (tierfs's part_size and write_parts defaults):
    what a store's own ceiling for tierfs's writes is measured with."""
    from concurrent.futures import ThreadPoolExecutor

    uid = c.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]

    def one(i):
        return c.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=i + 1,
                             Body=bytes(data[i * part:(i + 1) * part]))["ETag"]

    with ThreadPoolExecutor(inflight) as ex:
        etags = list(ex.map(one, range((len(data) + part - 1) // part)))
    c.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid, MultipartUpload={
        "Parts": [{"ETag": e, "PartNumber": i + 1} for i, e in enumerate(etags)]})


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




# ------------------------------------------------------------------------------------------
# number formats of the report

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


def per_run_ratio(a, c):
    """median over runs of the per-run ratio a[i] / c[i] (runs are interleaved, so each
    ratio compares figures taken close together)"""
    rs = [x / y for x, y in zip(a, c) if x and y]
    return statistics.median(rs) if rs else None
