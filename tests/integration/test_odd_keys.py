"""Keys no real filesystem would allow, from a small fake S3 server, and secrets that must
never leak.

s3rver stores keys as files and falls over on the keys worth testing ("a//b", "..", 300-byte
segments), so this module serves ListObjectsV2, HEAD and ranged GET itself from a dict of
keys (stdlib http.server on 127.0.0.1, a free port, stopped in teardown). It checks that
tierfs shows every key that can be a path, skips the ones that cannot without failing the
listing, and reads the bytes of the long ones right. It also runs tierfs in the foreground
with -d and looks for the secret key in everything tierfs prints or shows. The fake lists as S3
does (pages of 1000, continuation tokens, url-encoded keys when asked), so it also serves 100k
keys in one prefix with a nested case s3rver cannot list.
"""

import errno
import os
import re
import subprocess
import threading
import time
import urllib.parse
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

import pytest

import harness

BUCKET = "odd"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY-odd"
ENV = {"AWS_ACCESS_KEY_ID": "AKIDODDKEYS", "AWS_SECRET_ACCESS_KEY": SECRET,
       "AWS_SESSION_TOKEN": "session-token-odd-keys"}

LONG = "long/" + "L" * 255 + "/" + "M" * 255 + "/" + "N" * 255 + "/" + "O" * 250  # 1,024 bytes
KEYS = {
    "ok.txt": b"plain",
    "a//b.txt": b"empty segment",          # "a" is a directory; its "" child is skipped
    "dots/../x.txt": b"dotdot",            # ".." skipped
    "dots/./y.txt": b"dot",                # "." skipped
    "dots/z.txt": b"the real one",
    "tab\there.txt": b"a tab is a legal file name byte",
    "trail/": b"",                         # a directory marker, not a file
    "toolong/" + "P" * 300: b"segment past 255 bytes",  # skipped
    LONG: bytes(range(256)) * 300,         # 76,800 bytes in a 1,024-byte key
    "pct %41%2F+.bin": b"percent and plus",
    "ctl\x01char.txt": b"XML 1.0 cannot carry U+0001: S3 sends it url-encoded",
    "err/boom.bin": b"listed, but every GET fails with 500",
}
# What the mount must show: path -> bytes, and the directories.
FILES = {"ok.txt": KEYS["ok.txt"], "dots/z.txt": KEYS["dots/z.txt"],
         "tab\there.txt": KEYS["tab\there.txt"], LONG: KEYS[LONG],
         "pct %41%2F+.bin": KEYS["pct %41%2F+.bin"], "ctl\x01char.txt": KEYS["ctl\x01char.txt"]}
DIRS = {"a", "err", "dots", "trail", "toolong", "long", "long/" + "L" * 255,
        "long/" + "L" * 255 + "/" + "M" * 255, "long/" + "L" * 255 + "/" + "M" * 255 + "/" +
        "N" * 255}
MTIME = int(time.time())


def _etag(body):
    return '"%08x%08x"' % (len(body), sum(body) & 0xffffffff)


class FakeS3(BaseHTTPRequestHandler):
    """ListObjectsV2 as S3 answers it: pages of max-keys (1000) entries, keys and common
    prefixes in one sorted run, continuation tokens, and with encoding-type=url keys and
    prefixes form-encoded (a key holding U+0001 cannot be written in XML 1.0 otherwise)."""
    protocol_version = "HTTP/1.1"
    seen_auth = []
    keys = KEYS
    runs = {}  # (prefix, delimiter) -> sorted [(name, is_prefix)]

    def log_message(self, *args):
        pass

    def _send(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _key(self, path):
        prefix = f"/{BUCKET}/"
        return urllib.parse.unquote(path[len(prefix):]) if path.startswith(prefix) else None

    def do_GET(self):
        FakeS3.seen_auth.append(self.headers.get("Authorization", ""))
        url = urllib.parse.urlsplit(self.path)
        if url.path in (f"/{BUCKET}", f"/{BUCKET}/") and "list-type=2" in url.query:
            return self._list(urllib.parse.parse_qs(url.query, keep_blank_values=True))
        key = self._key(url.path)
        if key not in self.keys:
            return self._send(404, b"<Error><Code>NoSuchKey</Code></Error>")
        if key.startswith("err/"):
            return self._send(500, b"<Error><Code>InternalError</Code></Error>")
        body = self.keys[key]
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        hdrs = [("ETag", _etag(body)), ("Last-Modified", formatdate(MTIME, usegmt=True))]
        if not m:
            return self._send(200, body, hdrs)
        a, b = int(m.group(1)), min(int(m.group(2)), len(body) - 1)
        hdrs.append(("Content-Range", f"bytes {a}-{b}/{len(body)}"))
        return self._send(206, body[a:b + 1], hdrs)

    def do_HEAD(self):
        key = self._key(urllib.parse.urlsplit(self.path).path)
        if key not in self.keys:
            return self._send(404)
        body = self.keys[key]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", _etag(body))
        self.send_header("Last-Modified", formatdate(MTIME, usegmt=True))
        self.end_headers()

    def _run(self, prefix, delim):
        run = FakeS3.runs.get((prefix, delim))
        if run is None:
            names, prefixes = [], set()
            for k in self.keys:
                if not k.startswith(prefix):
                    continue
                rest = k[len(prefix):]
                if delim and delim in rest:
                    prefixes.add(prefix + rest[:rest.index(delim) + 1])
                else:
                    names.append((k, False))
            run = FakeS3.runs[(prefix, delim)] = sorted(names + [(p, True) for p in prefixes])
        return run

    def _list(self, q):
        prefix = q.get("prefix", [""])[0]
        delim = q.get("delimiter", [""])[0]
        url = q.get("encoding-type", [""])[0] == "url"
        start = int(q.get("continuation-token", ["0"])[0])
        size = min(int(q.get("max-keys", ["1000"])[0]), 1000)
        run = self._run(prefix, delim)
        page = run[start:start + size]
        more = start + size < len(run)

        def enc(k):
            return escape(urllib.parse.quote_plus(k, safe="/") if url else k)

        lm = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(MTIME))
        xml = ['<?xml version="1.0" encoding="UTF-8"?>',
               '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
               f"<Name>{BUCKET}</Name><Prefix>{enc(prefix)}</Prefix>",
               "<EncodingType>url</EncodingType>" if url else "",
               f"<KeyCount>{len(page)}</KeyCount><MaxKeys>{size}</MaxKeys>",
               f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>",
               f"<NextContinuationToken>{start + size}</NextContinuationToken>" if more else ""]
        for k, is_prefix in page:
            if is_prefix:
                xml.append(f"<CommonPrefixes><Prefix>{enc(k)}</Prefix></CommonPrefixes>")
                continue
            body = self.keys[k]
            xml.append(f"<Contents><Key>{enc(k)}</Key><LastModified>{lm}</LastModified>"
                       f"<ETag>{escape(_etag(body))}</ETag><Size>{len(body)}</Size>"
                       "</Contents>")
        xml.append("</ListBucketResult>")
        self._send(200, "".join(xml).encode(), [("Content-Type", "application/xml")])


@pytest.fixture
def fake_s3():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeS3)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    FakeS3.seen_auth = []
    FakeS3.keys, FakeS3.runs = KEYS, {}
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _opts(endpoint):
    return [f"endpoint={endpoint}", "path_style", "region=us-east-1", "block_size=64K"]


def test_odd_keys_become_a_sane_tree(mount, fake_s3):
    m = mount(f"s3://{BUCKET}", _opts(fake_s3), env=ENV)
    got_files, got_dirs = {}, set()
    for root, dirs, files in os.walk(m.mnt):
        rel = os.path.relpath(root, m.mnt)
        for d in dirs:
            got_dirs.add(d if rel == "." else f"{rel}/{d}")
        for f in files:
            p = f if rel == "." else f"{rel}/{f}"
            if p.startswith("err/"):
                continue
            with open(m.path(p), "rb") as fh:
                got_files[p] = fh.read()
    assert got_dirs == DIRS
    assert set(got_files) == set(FILES)
    for p, body in FILES.items():
        assert got_files[p] == body, f"{p!r}: wrong bytes"
    assert os.listdir(m.path("a")) == [] and os.listdir(m.path("toolong")) == []
    assert os.listdir(m.path("trail")) == []
    # every request was signed, with our key id, never with the secret in clear
    assert FakeS3.seen_auth and all(a.startswith("AWS4-HMAC-SHA256 Credential=AKIDODDKEYS/")
                                    for a in FakeS3.seen_auth if a)
    assert not any(SECRET in a for a in FakeS3.seen_auth)


def test_secret_never_shown(mount, fake_s3):
    """Foreground with -d (every FUSE request logged): the secret key and the session token
    appear nowhere tierfs writes or shows, nor in its command line."""
    m = mount(f"s3://{BUCKET}", _opts(fake_s3) + ["retries=1"], env=ENV, foreground=True)
    with open(m.path("ok.txt"), "rb") as fh:
        assert fh.read() == KEYS["ok.txt"]
    with pytest.raises(FileNotFoundError):
        open(m.path("no-such-key"), "rb")
    # a failing read is logged (with the URL and the cause): make one
    with pytest.raises(OSError) as e, open(m.path("err/boom.bin"), "rb") as fh:
        fh.read()
    assert e.value.errno == errno.EIO
    shown = []
    for f in (".tierfs/stats", ".tierfs/config"):
        with open(m.path(f)) as fh:
            shown.append(fh.read())
    shown.append(open(f"/proc/{m.proc.pid}/cmdline", "rb").read().decode(errors="replace"))
    shown.append(open(f"/proc/{m.proc.pid}/environ", "rb").read().decode(errors="replace")
                 .replace(SECRET, "") .replace(ENV["AWS_SESSION_TOKEN"], ""))
    log = harness.tail(m.log, 10**7)
    text = "\n".join(shown) + log
    assert "endpoint=" in shown[1]
    assert "err/boom.bin" in log, f"the failed read was not logged: {log[-2000:]}"
    assert SECRET not in text and ENV["AWS_SESSION_TOKEN"] not in text


def test_secret_as_option_is_refused(mountpoint, tierfs_bin):
    rc, _, err = harness.run_tierfs(
        [f"s3://{BUCKET}", str(mountpoint), "-o", f"aws_secret_access_key={SECRET}"])
    assert rc != 0 and not harness.mounted(mountpoint)
    assert len(err) == 1 and "/proc" in err[0] and SECRET not in err[0]


def _rss_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


@pytest.mark.watchdog(600)
def test_100k_keys_one_prefix_s3(mount, fake_s3):
    """The s3 backend on 100k keys in one prefix, from the fake's listing (s3rver drops common
    prefixes of keys nested two levels below the listed prefix, and takes minutes to fill):
    101 pages of 1000, url-encoded, with a key nested two levels down (p/deep/a/b.bin) and one
    holding U+0001. ls, ls -l, find and a stat of one name: right counts, times and the
    daemon's peak RSS printed."""
    n = 100_000
    keys = {f"p/{i:020d}.log": b"" for i in range(n)}
    keys["p/00000000000000004000.log"] = b"x" * 100
    keys["p/deep/a/b.bin"] = b"nested two levels below p/"
    keys["p/ctl\x01char.log"] = b"U+0001"
    FakeS3.keys, FakeS3.runs = keys, {}
    m = mount(f"s3://{BUCKET}", _opts(fake_s3) + ["metadata_ttl=600", "hot_size=8M",
                                                   "lagging_size=8M"], env=ENV)
    pid = m.pids[0]
    out, r = {}, {}

    def timed(name, fn):
        t = time.monotonic()
        fn()
        out[name] = time.monotonic() - t

    timed("stat one (first)", lambda: r.update(st=os.stat(m.path("p/00000000000000004000.log"))))
    assert r["st"].st_size == 100
    timed("ls", lambda: r.update(ls=subprocess.run(["ls", m.path("p")], capture_output=True,
                                                   check=True).stdout.split(b"\n")))
    names = [x for x in r["ls"] if x]
    assert len(names) == n + 2 and b"deep" in names and b"ctl\x01char.log" in names
    timed("ls -l", lambda: r.update(ll=subprocess.run(
        ["ls", "-l", m.path("p")], capture_output=True, check=True).stdout.count(b"\n")))
    assert r["ll"] == n + 3  # and the "total" line
    timed("find", lambda: r.update(find=subprocess.run(
        ["find", m.path("p")], capture_output=True, check=True).stdout.count(b"\n")))
    assert r["find"] == n + 5  # p, p/deep, p/deep/a and p/deep/a/b.bin among them
    with open(m.path("p/deep/a/b.bin"), "rb") as f:
        assert f.read() == keys["p/deep/a/b.bin"]
    peak = _rss_kib(pid, "VmHWM")
    print("100k keys in one prefix (s3, 101 pages): " +
          ", ".join(f"{k} {v:.2f} s" for k, v in out.items()) + f"; peak RSS {peak / 1024:.1f} MiB")
    assert out["ls"] < 60 and out["ls -l"] < 120 and out["find"] < 60
    assert peak < (256 if not harness.sanitizer() else 1024) * 1024


class EndlessS3(BaseHTTPRequestHandler):
    """A hostile ListObjectsV2: every page is truncated and names a next one, forever, and
    every object is missing. @kind "new": 1000 new keys a page; "same": the same 1000 keys on
    every page; "long": 1000 new keys of about 200 bytes a page."""
    protocol_version = "HTTP/1.1"
    kind = "new"
    pages = 0

    def log_message(self, *args):
        pass

    def _send(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self._send(404)

    def do_GET(self):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query,
                                  keep_blank_values=True)
        if "list-type" not in q:
            return self._send(404, b"<Error><Code>NoSuchKey</Code></Error>")
        EndlessS3.pages += 1
        page = int(q.get("continuation-token", ["0"])[0])
        prefix = q.get("prefix", [""])[0]
        first = 0 if self.kind == "same" else page * 1000
        pad = "x" * 190 if self.kind == "long" else ""
        lm = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(MTIME))
        xml = ['<?xml version="1.0" encoding="UTF-8"?>',
               '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
               f"<Name>{BUCKET}</Name><Prefix>{escape(prefix)}</Prefix>",
               "<KeyCount>1000</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>",
               f"<NextContinuationToken>{page + 1}</NextContinuationToken>"]
        for i in range(first, first + 1000):
            xml.append(f"<Contents><Key>{escape(prefix)}k{pad}{i:09d}</Key>"
                       f"<LastModified>{lm}</LastModified><ETag>\"{i:016x}\"</ETag>"
                       "<Size>1</Size></Contents>")
        xml.append("</ListBucketResult>")
        self._send(200, "".join(xml).encode(), [("Content-Type", "application/xml")])


@pytest.fixture
def endless_s3():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), EndlessS3)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    EndlessS3.pages = 0
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("kind,bound,words", [
    ("new", {"TIERFS_LIST_MAX_KEYS": "5000"}, "more than 5000 entries"),
    ("same", {"TIERFS_LIST_MAX_KEYS": "5000"}, "more than 5000 entries"),
    ("long", {"TIERFS_LIST_MAX_BYTES": str(1 << 20)}, f"more than {1 << 20} bytes of names"),
])
def test_endless_listing_is_cut_off(mount, endless_s3, kind, bound, words):
    """Issue 28: a listing that pages forever was bounded only by 1,000,000 pages, holding
    every entry meanwhile. Now every listing stops past BK_LIST_MAX_KEYS entries or
    BK_LIST_MAX_BYTES of names and ETags (lowered here through the environment, so that a few
    pages reach them): the directory fails with EFBIG within a few pages, one line says why,
    and the mount goes on answering."""
    EndlessS3.kind = kind
    m = mount(f"s3://{BUCKET}", _opts(endless_s3) + ["retries=0"], env={**ENV, **bound},
              foreground=True)
    got = {}

    def ls():
        try:
            got["names"] = os.listdir(m.mnt)
        except OSError as e:
            got["err"] = e.errno

    t = threading.Thread(target=ls, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), f"ls still running after 60 s, {EndlessS3.pages} pages asked"
    assert got.get("err") == errno.EFBIG, (got.get("err"), len(got.get("names", [])))
    # the mount's check asks one page, each listing (the mount's first, then ls's, as the
    # first failed) 5 or 6 before it is over; and then nothing pages on behind the reader
    pages = EndlessS3.pages
    assert pages <= 1 + 2 * 6, pages
    time.sleep(1)
    assert EndlessS3.pages == pages, (pages, EndlessS3.pages)
    log = harness.tail(m.log, 10**6)
    assert words in log and "EFBIG" in log, log[-2000:]
    with open(m.path(".tierfs/stats")) as f:
        assert "tierfs_" in f.read()
