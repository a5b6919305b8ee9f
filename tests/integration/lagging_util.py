"""Helpers for the lagging-tier tests (test_lagging.py): an nginx with a timed access log, the
stats and config files parsed, a stats sampler, and readers that bypass the page cache.

The harness's nginx logs method, URI, Range, If-Match, status and body bytes. The tests here
also need *when* each body was sent, to measure fetch rates at the server: TimedNginx keeps the
harness's log (so harness helpers such as gets() and wait_idle() keep working) and writes a
second one, timed.log, with $msec (wall-clock time the response finished, ms resolution) and
$request_time.
"""

import hashlib
import mmap
import os
import re
import sys
import threading
import time
import urllib.parse
from typing import NamedTuple

import harness

MIB = 1 << 20


# ---------------------------------------------------------------------------------------------
# nginx with a timed log


class TimedRequest(NamedTuple):
    t_end: float  # $msec: wall-clock seconds when the response was finished
    duration: float  # $request_time, seconds
    method: str
    path: str  # decoded, relative to the root, no leading '/'
    range: str  # "" if none
    status: int
    body_bytes: int


TIMED_FORMAT = ("log_format timed '$msec $request_time $request_method \"$request_uri\" "
                "\"$http_range\" $status $body_bytes_sent';")
TIMED_RE = re.compile(r'^(\d+\.\d+) (\d+\.\d+) (\S+) "([^"]*)" "([^"]*)" (\d+) (\d+)$')


class TimedNginx(harness.Nginx):
    """harness.Nginx plus {dir}/timed.log: one line per request with its end time.
    @slow_prefix: responses under /@slow_prefix/ are sent at @slow_rate bytes/s per request
    (nginx limit_rate), to keep fetches of those objects on their connections for a while."""

    def __init__(self, root, workdir, tls=None, slow_prefix=None, slow_rate="1m"):
        super().__init__(root, workdir, tls)
        self.slow_prefix = slow_prefix
        self.slow_rate = slow_rate

    @property
    def timed_log(self):
        return self.dir / "timed.log"

    def _conf(self):
        conf = super()._conf()
        anchor = f"access_log {self.dir}/access.log tierfs;"
        if anchor not in conf:
            raise RuntimeError("the harness's nginx.conf has no access_log line to extend: "
                               "update lagging_util.TimedNginx")
        conf = conf.replace(anchor, f"{anchor}\n    {TIMED_FORMAT}\n"
                                    f"    access_log {self.timed_log} timed;")
        if self.slow_prefix:
            anchor = "etag on;"
            if anchor not in conf:
                raise RuntimeError("the harness's nginx.conf has no 'etag on;' line: update "
                                   "lagging_util.TimedNginx")
            conf = conf.replace(anchor, f"{anchor}\n        location /{self.slow_prefix}/ "
                                        f"{{ limit_rate {self.slow_rate}; }}")
        return conf

    def timed_mark(self):
        try:
            return self.timed_log.stat().st_size
        except FileNotFoundError:
            return 0

    def timed_requests(self, since=0):
        out = []
        try:
            with open(self.timed_log, "rb") as f:
                f.seek(since)
                raw = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return out
        for line in raw.splitlines():
            m = TIMED_RE.match(line)
            if not m:
                continue
            t, d, method, uri, rng, status, nbytes = m.groups()
            path = urllib.parse.unquote(uri.split("?", 1)[0]).lstrip("/")
            out.append(TimedRequest(float(t), float(d), method, path,
                                    "" if rng == "-" else rng, int(status), int(nbytes)))
        return out

    def range_gets(self, paths, since=0):
        """GETs with a Range of any of @paths logged after @since."""
        paths = set(paths)
        return [r for r in self.timed_requests(since)
                if r.method == "GET" and r.range and r.path in paths]

    def wait_logged(self, paths, nbytes, since=0, timeout=20):
        """Wait until the range GETs of @paths after @since add up to at least @nbytes body
        bytes, then until nginx is idle (so nothing still in flight is missed)."""
        try:
            harness.wait_until(
                lambda: sum(r.body_bytes for r in self.range_gets(paths, since)) >= nbytes,
                timeout, f"{nbytes} bytes of range GETs in nginx's log")
        except TimeoutError:
            pass  # the caller's assertion reports what was logged
        self.wait_idle()
        return self.range_gets(paths, since)


# ---------------------------------------------------------------------------------------------
# the control surface

SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)$')


class Stats(dict):
    """{(metric name without the tierfs_ prefix, tier or None): value}."""

    def v(self, name, tier=None):
        key = (name, tier)
        if key not in self:
            raise AssertionError(f"stats: no tierfs_{name}{{tier={tier!r}}}")
        return self[key]

    def d(self, before, name, tier=None):
        """This value minus @before's."""
        return self.v(name, tier) - before.v(name, tier)


def parse_stats(text):
    out = Stats()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        if not m:
            raise AssertionError(f"stats: unparsable line {line!r}")
        name, labels, value = m.groups()
        tier = None
        if labels:
            # tier="..." (or a store request's op="..."; kept in the same slot) and, on a
            # histogram's buckets, le="..." after it
            lm = re.fullmatch(r'(?:tier|op)="([^"]*)"(?:,le="([^"]*)")?', labels)
            if not lm or (lm.group(2) is not None) != name.endswith("_bucket"):
                raise AssertionError(f"stats: unexpected labels in {line!r}")
            tier = lm.group(1)
            if lm.group(2) is not None:
                name += f"[{lm.group(2)}]"  # ("x_bucket[0.05]", tier)
        if name.startswith("tierfs_"):
            name = name[len("tierfs_"):]
        out[(name, tier)] = float(value)
    return out


def stats(mnt, control_dir=".tierfs"):
    with open(os.path.join(mnt, control_dir, "stats")) as f:
        return parse_stats(f.read())


def config(mnt, control_dir=".tierfs"):
    """The config file as {name: value}; a bare flag maps to True."""
    out = {}
    with open(os.path.join(mnt, control_dir, "config")) as f:
        for line in f.read().splitlines():
            if line:
                k, sep, v = line.partition("=")
                out[k] = v if sep else True
    return out


def xattr(path, name):
    return os.getxattr(path, "user.tierfs." + name).decode()


class Sampler:
    """Reads the stats file every @interval seconds in a thread: .samples = [(monotonic, Stats)]."""

    def __init__(self, mnt, interval=0.1):
        self.mnt = mnt
        self.interval = interval
        self.samples = []
        self.error = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            while True:
                s = stats(self.mnt)
                self.samples.append((time.monotonic(), s))
                if self._stop.wait(self.interval):
                    return
        except BaseException as e:  # reported by stop()
            self.error = e

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self._stop.set()
        self._t.join(timeout=30)
        if self.error:
            raise AssertionError(f"reading the stats file failed: {self.error!r}")


# ---------------------------------------------------------------------------------------------
# readers


def sha256_read(path, chunk=MIB):
    """sha256 of @path read through plain read(2) calls of @chunk bytes."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            b = os.read(fd, chunk)
            if not b:
                break
            h.update(b)
    finally:
        os.close(fd)
    return h.hexdigest()


def pread_direct(path, off, n):
    """@n bytes at @off of @path, read with O_DIRECT on a fresh descriptor: the read reaches
    tierfs as it is, and as the first read of its handle (a random one unless @off is 0)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, n)  # page aligned
    try:
        got = os.preadv(fd, [buf], off)
        return bytes(buf[:got])
    finally:
        buf.close()
        os.close(fd)


def read_direct(path, buf):
    """Read @path to its end with O_DIRECT into the page-aligned @buf (an mmap); return the
    bytes. The page cache is bypassed, so every byte is asked of tierfs."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    out = bytearray()
    try:
        while True:
            n = os.preadv(fd, [buf], len(out))
            if n == 0:
                break
            out += buf[:n]
    finally:
        os.close(fd)
    return bytes(out)


def aligned_buffer(size=MIB):
    return mmap.mmap(-1, size)


# A replay in a separate process: reads each path to its end (one thread per path with
# "par", one after the other with "seq"), then prints the byte count. Same interpreter.
REPLAY_SCRIPT = r"""
import os, sys, threading
mode, paths = sys.argv[1], sys.argv[2:]
total = [0] * len(paths)
def read(i):
    fd = os.open(paths[i], os.O_RDONLY)
    try:
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            total[i] += len(b)
    finally:
        os.close(fd)
if mode == "par":
    ts = [threading.Thread(target=read, args=(i,)) for i in range(len(paths))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
else:
    for i in range(len(paths)):
        read(i)
print(sum(total), flush=True)
"""


def replay_argv(paths, parallel=False):
    return [sys.executable, "-c", REPLAY_SCRIPT, "par" if parallel else "seq"] + \
        [str(p) for p in paths]
