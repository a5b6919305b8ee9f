"""A fault-injecting HTTP/1.1 reverse proxy for the tierfs integration tests.

    tierfs ──► FaultProxy (127.0.0.1:free port) ──► nginx or s3rver (127.0.0.1:upstream port)

Stdlib only: one accept thread, one thread per client connection (keep-alive), one upstream
keep-alive connection per client connection. The test drives it in-process:

    px = FaultProxy(nginx.port).start()
    rule = px.add_rule(match=lambda r: r.method == "GET" and r.path == "obj.bin" and r.range,
                       fault=faults.status(503), times=2)
    ... read through the mount ...
    assert rule.hits == 2
    assert px.count("obj.bin", first=65536) == 3     # GETs of that range the proxy saw
    px.stop()                                        # releases every stall, joins every thread

A rule's @match gets a Request (method, path decoded without the leading '/', range, if_match,
headers); the first rule that matches and has hits left (times=None: no limit) applies its
fault. Requests that match no rule are forwarded untouched. Every request is recorded
(Record: the request, the status sent, the fault applied, whether the answer was complete).

Faults (see the `faults` namespace below):
    status(code)            answer that status without asking the store (503 gets an S3
                            SlowDown document, 403 AccessDenied, 404 NoSuchKey)
    stall_headers(s)        wait s seconds (None: until released) before answering
    stall_body(after, s)    send the headers and @after body bytes, wait, then the rest
    drop_body(after)        send the headers and @after body bytes, then close (or reset)
    short_body(missing)     Content-Length as the store said, @missing bytes fewer, then close;
                            consistent=True: Content-Length says the short length too
    long_body(extra)        @extra junk bytes after the body (Content-Length as the store
                            said); declared=True: Content-Length counts the junk too
    content_range(value)    a 206 of the right length with Content-Range @value (None: none)
    drop_headers(*names)    the store's answer without the headers @names (e.g. "ETag")
    whole_200()             ask the store without Range: 200 and the whole object
    strip_if_match()        forward without If-Match (a store that ignores it)
    reset()                 close the connection without answering

Stores the proxy plays itself:
    set_object(path, data, etag, mtime, honour_if_match, get_etag)   serve HEAD/GET/Range of
        @path from memory (a changed object: new bytes and ETag; honour_if_match answers 412 to
        an If-Match naming another ETag, else the new version is sent whatever If-Match says;
        get_etag=False sends the ETag on HEAD only, never with the bytes)
    go_away("refuse" | "reset" | "blackhole") / come_back()   the whole store disappears:
        connections refused (the port stays bound, not listening), accepted and reset, or
        accepted and never answered; open connections are closed.
"""

import email.utils
import http.client
import re
import socket
import struct
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "te",
              "trailer", "upgrade", "proxy-connection"}

S3_ERROR = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            '<Message>{msg}</Message><RequestId>faultproxy</RequestId></Error>')
STATUS_DOCS = {
    503: ("SlowDown", "Please reduce your request rate."),
    429: ("SlowDown", "Too many requests."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
    403: ("AccessDenied", "Access Denied"),
    404: ("NoSuchKey", "The specified key does not exist."),
    412: ("PreconditionFailed", "At least one of the preconditions you specified did not hold."),
}


# ---------------------------------------------------------------------------------------------
# requests and records


@dataclass
class Request:
    method: str
    target: str  # as sent
    path: str  # decoded, no query, no leading '/'
    query: str
    headers: dict  # lower-case name -> value
    conn_id: int

    @property
    def range(self):
        return self.headers.get("range", "")

    @property
    def if_match(self):
        return self.headers.get("if-match", "")

    def byte_range(self, size=None):
        """(first, last) of "bytes=a-b" / "bytes=a-" (last None without @size); else None."""
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.range.strip())
        if not m:
            return None
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else (size - 1 if size is not None else None)
        if size is not None and last is not None:
            last = min(last, size - 1)
        return first, last

    @property
    def first(self):
        br = self.byte_range()
        return br[0] if br else None


@dataclass
class Record:
    req: Request
    t_start: float
    fault: str = ""  # name of the fault applied, "" if forwarded untouched
    status: int = 0  # status line sent, 0 if none was
    complete: bool = False  # the whole answer was sent
    t_end: float = 0.0

    @property
    def method(self):
        return self.req.method

    @property
    def path(self):
        return self.req.path

    @property
    def range(self):
        return self.req.range

    @property
    def first(self):
        return self.req.first


class Rule:
    def __init__(self, proxy, match, fault, times):
        self.proxy = proxy
        self.match = match
        self.fault = fault
        self.times = times  # None: no limit
        self.hits = 0

    def exhausted(self):
        return self.times is not None and self.hits >= self.times

    def remove(self):
        self.proxy.remove_rule(self)


# ---------------------------------------------------------------------------------------------
# faults


class Fault:
    name = "fault"

    def __init__(self):
        self.go = threading.Event()  # release()
        self._lock = threading.Lock()
        self.waiting = 0  # requests stalled in this fault now
        self.served = 0  # requests this fault handled

    def release(self):
        self.go.set()

    def _stall(self, px, seconds):
        with self._lock:
            self.waiting += 1
        try:
            px._wait(self.go, seconds)
        finally:
            with self._lock:
                self.waiting -= 1

    def apply(self, px, h, req, rec):
        raise NotImplementedError


class Status(Fault):
    def __init__(self, code, body=None, headers=None):
        super().__init__()
        self.code = code
        self.name = f"status {code}"
        if body is None and code in STATUS_DOCS:
            c, m = STATUS_DOCS[code]
            body = S3_ERROR.format(code=c, msg=m).encode()
        self.body = body or b""
        self.headers = list(headers or [])
        if body is not None or code in STATUS_DOCS:
            self.headers.append(("Content-Type", "application/xml"))

    def apply(self, px, h, req, rec):
        hdrs = list(self.headers)
        if self.code in (503, 429):
            hdrs.append(("Retry-After", "1"))
        h.send_response(rec, self.code, hdrs, self.body, head=req.method == "HEAD")


class StallHeaders(Fault):
    def __init__(self, seconds=None):
        super().__init__()
        self.seconds = seconds
        self.name = f"stall headers {seconds}s" if seconds is not None else "stall headers"

    def apply(self, px, h, req, rec):
        self._stall(px, self.seconds)
        if px.stopping:
            h.close()
            return
        h.forward_and_send(req, rec)


class StallBody(Fault):
    def __init__(self, after, seconds=None):
        super().__init__()
        self.after = after
        self.seconds = seconds
        self.name = f"stall body after {after}"

    def apply(self, px, h, req, rec):
        status, reason, hdrs, body = h.forward(req)
        h.send_head(rec, status, hdrs, len(body), reason)
        h.send_raw(body[:self.after])
        self._stall(px, self.seconds)
        if px.stopping:
            h.close()
            return
        h.send_raw(body[self.after:])
        rec.complete = True


class DropBody(Fault):
    def __init__(self, after, rst=False):
        super().__init__()
        self.after = after
        self.rst = rst
        self.name = f"drop body after {after}" + (" (RST)" if rst else "")

    def apply(self, px, h, req, rec):
        status, reason, hdrs, body = h.forward(req)
        h.send_head(rec, status, hdrs, len(body), reason)
        h.send_raw(body[:self.after])
        h.close(rst=self.rst)


class ShortBody(Fault):
    def __init__(self, missing, consistent=False):
        super().__init__()
        self.missing = missing
        self.consistent = consistent
        self.name = f"short body -{missing}" + (" (consistent)" if consistent else "")

    def apply(self, px, h, req, rec):
        status, reason, hdrs, body = h.forward(req)
        short = body[:max(0, len(body) - self.missing)]
        if self.consistent:
            # a complete, well-formed answer whose body is shorter than its Content-Range says
            h.send_response(rec, status, hdrs, short, reason=reason)
            return
        h.send_head(rec, status, hdrs, len(body), reason)
        h.send_raw(short)
        h.close()


class LongBody(Fault):
    def __init__(self, extra, declared=False, then_close=False):
        super().__init__()
        self.extra = extra
        self.declared = declared
        self.then_close = then_close
        self.name = f"long body +{extra}" + (" (declared)" if declared else "")

    def apply(self, px, h, req, rec):
        status, reason, hdrs, body = h.forward(req)
        junk = bytes((i * 7 + 3) & 0xFF for i in range(self.extra))
        if self.declared:
            h.send_response(rec, status, hdrs, body + junk, reason=reason)
            return
        h.send_head(rec, status, hdrs, len(body), reason)
        h.send_raw(body + junk)
        rec.complete = True
        # the junk is what a client that trusts Content-Length reads as the start of the next
        # answer on this connection; by default the connection stays open for more requests
        h.close_after_this = self.then_close


class ContentRange(Fault):
    """@value: a string, None (no Content-Range), or fn(first, last, total) -> string."""

    def __init__(self, value):
        super().__init__()
        self.value = value
        self.name = f"content-range {value!r}" if not callable(value) else "content-range fn"

    def apply(self, px, h, req, rec):
        status, reason, hdrs, body = h.forward(req)
        cr = next((v for k, v in hdrs if k.lower() == "content-range"), None)
        hdrs = [(k, v) for k, v in hdrs if k.lower() != "content-range"]
        value = self.value
        if callable(value):
            m = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", (cr or "").strip())
            if m:
                value = value(int(m.group(1)), int(m.group(2)),
                              None if m.group(3) == "*" else int(m.group(3)))
            else:
                value = None
        if value is not None:
            hdrs.append(("Content-Range", value))
        h.send_response(rec, status, hdrs, body, reason=reason)


class DropHeaders(Fault):
    def __init__(self, *names):
        super().__init__()
        self.drop = {n.lower() for n in names}
        self.name = "drop headers " + ", ".join(names)

    def apply(self, px, h, req, rec):
        status, reason, hdrs, body = h.forward(req)
        hdrs = [(k, v) for k, v in hdrs if k.lower() not in self.drop]
        h.send_response(rec, status, hdrs, body, reason=reason, head=req.method == "HEAD")


class Whole200(Fault):
    name = "200 whole object"

    def apply(self, px, h, req, rec):
        status, reason, hdrs, body = h.forward(req, drop=("range",))
        h.send_response(rec, status, hdrs, body, reason=reason)


class StripIfMatch(Fault):
    name = "strip If-Match"

    def apply(self, px, h, req, rec):
        h.forward_and_send(req, rec, drop=("if-match",))


class Reset(Fault):
    name = "reset"

    def apply(self, px, h, req, rec):
        h.close(rst=True)


class faults:
    """Fault constructors: proxy.add_rule(match, faults.status(503), times=2)."""

    status = Status
    stall_headers = StallHeaders
    stall_body = StallBody
    drop_body = DropBody
    short_body = ShortBody
    long_body = LongBody
    content_range = ContentRange
    drop_headers = DropHeaders
    whole_200 = Whole200
    strip_if_match = StripIfMatch
    reset = Reset

    @staticmethod
    def slow_down():
        return Status(503)


# ---------------------------------------------------------------------------------------------
# objects the proxy serves itself


@dataclass
class Served:
    data: bytes
    etag: str
    mtime: float
    honour_if_match: bool = True
    get_etag: bool = True
    hits: list = field(default_factory=list)


def _etag_list(v):
    return [e.strip() for e in v.split(",") if e.strip()]


# ---------------------------------------------------------------------------------------------
# one client connection


class _Closed(Exception):
    pass


class _Conn:
    def __init__(self, px, sock, cid):
        self.px = px
        self.sock = sock
        self.cid = cid
        self.rfile = sock.makefile("rb")
        self.up = None  # http.client.HTTPConnection to the store; handler thread only
        self.owner = None  # the handler thread's ident
        self.closed = False  # set by anyone: the connection is going away
        self.released = False  # the handler closed its sockets
        self.close_after_this = False

    # -- sending -------------------------------------------------------------------------

    def send_raw(self, data):
        if self.closed:
            raise _Closed()
        try:
            self.sock.sendall(data)
        except OSError:
            self.close()
            raise _Closed()

    def send_head(self, rec, status, headers, length, reason=None, head=False):
        reason = reason or http.client.responses.get(status, "Status")
        lines = [f"HTTP/1.1 {status} {reason}"]
        have_len = False
        for k, v in headers:
            lk = k.lower()
            if lk == "content-length" and head:
                have_len = True
                lines.append(f"{k}: {v}")
            elif lk not in HOP_BY_HOP:
                lines.append(f"{k}: {v}")
        if not head:
            lines.append(f"Content-Length: {length}")
        elif not have_len:
            lines.append(f"Content-Length: {length}")
        rec.status = status
        self.send_raw(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def send_response(self, rec, status, headers, body, reason=None, head=False):
        self.send_head(rec, status, headers, len(body), reason, head=head)
        if not head:
            self.send_raw(body)
        rec.complete = True

    def close(self, rst=False):
        """Close the connection: from the handler's own thread, at once (@rst: with a TCP
        reset); from any other thread (go_away, stop), shut the sockets down, which wakes a
        handler blocked reading and lets it release them (closing a file object another
        thread is reading would wait for that read forever)."""
        if threading.get_ident() != self.owner:
            self.closed = True
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            up = self.up
            if up is not None and up.sock is not None:
                try:
                    up.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            return
        if self.released:
            return
        self.closed = self.released = True
        try:
            if rst:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                     struct.pack("ii", 1, 0))
            else:
                self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for f in (self.rfile, self.sock):
            try:
                f.close()
            except OSError:
                pass
        self.close_upstream()

    def close_upstream(self):
        up, self.up = self.up, None
        if up is not None:
            try:
                if up.sock is not None:
                    up.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            up.close()

    # -- the store -----------------------------------------------------------------------

    def forward(self, req, drop=()):
        """Ask the store; return (status, reason, headers, body) with the body read whole."""
        hdrs = [(k, v) for k, v in req.raw_headers if k.lower() not in HOP_BY_HOP
                and k.lower() not in drop]
        if req.body or req.method in ("PUT", "POST"):  # a body (or an empty one) says its length
            hdrs.append(("Content-Length", str(len(req.body or b""))))
        for attempt in range(2):
            if self.px.stopping or self.closed:
                raise _Closed()
            if self.up is None:
                self.up = http.client.HTTPConnection("127.0.0.1", self.px.upstream_port,
                                                     timeout=60)
                with self.px._lock:
                    self.px._upstreams.add(self)
            try:
                self.up.putrequest(req.method, req.target, skip_host=True,
                                   skip_accept_encoding=True)
                for k, v in hdrs:
                    self.up.putheader(k, v)
                self.up.endheaders(req.body or None)
                r = self.up.getresponse()
                body = r.read()
                if r.will_close:
                    self.close_upstream()
                return r.status, r.reason, r.getheaders(), body
            except (OSError, http.client.HTTPException):
                self.close_upstream()
                if attempt == 1:
                    return 502, "Bad Gateway", [], b"faultproxy: the store did not answer\n"
        raise AssertionError("unreachable")

    def forward_and_send(self, req, rec, drop=()):
        status, reason, hdrs, body = self.forward(req, drop)
        self.send_response(rec, status, hdrs, body, reason=reason, head=req.method == "HEAD")

    # -- the proxy's own objects ---------------------------------------------------------

    def serve_object(self, req, rec, obj):
        obj.hits.append(req)
        size = len(obj.data)
        head = req.method == "HEAD"
        base = [("ETag", obj.etag)] if head or obj.get_etag else []
        base += [("Last-Modified", email.utils.formatdate(obj.mtime, usegmt=True)),
                 ("Accept-Ranges", "bytes"), ("Content-Type", "application/octet-stream")]
        if req.method not in ("GET", "HEAD"):
            self.send_response(rec, 405, [], b"")
            return
        im = req.if_match
        if im and obj.honour_if_match and im.strip() != "*" and obj.etag not in _etag_list(im):
            c, m = STATUS_DOCS[412]
            self.send_response(rec, 412, [("Content-Type", "application/xml")],
                               S3_ERROR.format(code=c, msg=m).encode(), head=head)
            return
        rng = req.range.strip()
        if rng and not head:
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng)
            first = last = None
            if m and (m.group(1) or m.group(2)):
                if m.group(1):
                    first = int(m.group(1))
                    last = int(m.group(2)) if m.group(2) else size - 1
                else:
                    n = int(m.group(2))
                    first, last = max(0, size - n), size - 1
                last = min(last, size - 1)
            if first is None or first >= size or first > last:
                self.send_response(rec, 416, base + [("Content-Range", f"bytes */{size}")], b"")
                return
            self.send_response(rec, 206, base + [("Content-Range",
                                                  f"bytes {first}-{last}/{size}")],
                               obj.data[first:last + 1])
            return
        self.send_head(rec, 200, base, size, head=head)
        if not head:
            self.send_raw(obj.data)
        rec.complete = True

    # -- the loop ------------------------------------------------------------------------

    def read_request(self):
        line = self.rfile.readline(65537)
        if not line:
            return None
        while line in (b"\r\n", b"\n"):  # tolerate stray blank lines between requests
            line = self.rfile.readline(65537)
            if not line:
                return None
        parts = line.decode("latin-1").rstrip("\r\n").split(" ")
        if len(parts) != 3:
            raise _Closed()
        method, target, _version = parts
        raw = []
        while True:
            hl = self.rfile.readline(65537)
            if not hl:
                return None
            if hl in (b"\r\n", b"\n"):
                break
            k, _, v = hl.decode("latin-1").partition(":")
            raw.append((k.strip(), v.strip()))
        headers = {}
        for k, v in raw:
            headers[k.lower()] = v
        body = b""
        n = int(headers.get("content-length", "0") or 0)
        if n:
            body = self.rfile.read(n)
        u = urllib.parse.urlsplit(target)
        path = urllib.parse.unquote(u.path).lstrip("/")
        req = Request(method, target, path, u.query, headers, self.cid)
        req.raw_headers = raw
        req.body = body
        return req

    def run(self):
        px = self.px
        self.owner = threading.get_ident()
        try:
            while not self.closed and not px.stopping:
                try:
                    req = self.read_request()
                except (OSError, ValueError):
                    req = None
                if req is None:
                    break
                rec = Record(req, time.monotonic())
                px._record(rec)
                mode = px.away
                if mode is not None:
                    rec.fault = f"store away ({mode})"
                    if mode == "blackhole":
                        px._wait(px._back, None)
                    rec.t_end = time.monotonic()
                    self.close(rst=mode != "blackhole")
                    break
                try:
                    rule = px._pick(req)
                    obj = px._served.get(req.path)
                    if rule is not None:
                        rec.fault = rule.fault.name
                        with rule.fault._lock:
                            rule.fault.served += 1
                        rule.fault.apply(px, self, req, rec)
                    elif obj is not None:
                        self.serve_object(req, rec, obj)
                    else:
                        self.forward_and_send(req, rec)
                finally:
                    rec.t_end = time.monotonic()
                if self.close_after_this or req.headers.get("connection", "").lower() == "close":
                    break
        except _Closed:
            pass
        except Exception as e:  # a bug in the proxy: remember it for the test to report
            if not (self.closed or px.stopping):
                px.errors.append(repr(e))
        finally:
            self.close()
            with px._lock:
                px._conns.discard(self)
                px._upstreams.discard(self)


# ---------------------------------------------------------------------------------------------
# the proxy


class FaultProxy:
    def __init__(self, upstream_port, host="127.0.0.1"):
        self.upstream_port = upstream_port
        self.host = host
        self.port = None
        self.stopping = False
        self.away = None  # None, "refuse", "reset" or "blackhole"
        self.errors = []  # exceptions inside the proxy (a proxy bug, not a tierfs one)
        self._lock = threading.Lock()
        self._rules = []
        self._records = []
        self._served = {}
        self._conns = set()
        self._upstreams = set()
        self._threads = []
        self._listener = None
        self._accept_thread = None
        self._stop_ev = threading.Event()
        self._back = threading.Event()
        self._next_cid = 0

    # -- life ----------------------------------------------------------------------------

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/"

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def _bind(self, port=0):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.host, port))
        return s

    def start(self):
        s = self._bind()
        s.listen(128)
        s.settimeout(0.1)
        self._listener = s
        self.port = s.getsockname()[1]
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True,
                                               name=f"faultproxy-accept-{self.port}")
        self._accept_thread.start()
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _accept_loop(self):
        while not self.stopping:
            s = self._listener
            try:
                sock, _ = s.accept()
            except socket.timeout:
                continue
            except OSError:
                if self.stopping:
                    return
                time.sleep(0.01)  # the listener is being swapped (go_away / come_back)
                continue
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self.stopping:
                    sock.close()
                    return
                self._next_cid += 1
                c = _Conn(self, sock, self._next_cid)
                self._conns.add(c)
                t = threading.Thread(target=c.run, daemon=True,
                                     name=f"faultproxy-conn-{self.port}-{c.cid}")
                self._threads.append(t)
            t.start()

    def stop(self, timeout=10):
        """Release every stall, close every connection and join every thread. Returns the
        names of threads that did not end (none, normally). Safe to call twice."""
        self.stopping = True
        self._stop_ev.set()
        self._back.set()
        with self._lock:
            for r in self._rules:
                r.fault.release()
            conns = list(self._conns)
        for c in conns:
            c.close()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        if self._listener is not None:
            try:
                self._listener.close()
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            for c in list(self._conns):
                c.close()
        left = [t.name for t in threads if t.is_alive()]
        if self._accept_thread is not None and self._accept_thread.is_alive():
            left.append(self._accept_thread.name)
        return left

    def _wait(self, ev, seconds):
        """Wait for @ev, @seconds (None: no limit) or the proxy's stop, whichever first."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while not ev.is_set() and not self._stop_ev.is_set():
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if left <= 0:
                return
            ev.wait(left)

    # -- the store going away ------------------------------------------------------------

    def go_away(self, mode="refuse"):
        """The store disappears. refuse: connections are refused (the port stays bound but
        does not listen); reset: connections are accepted and reset at the first request;
        blackhole: accepted, read, never answered. Open connections are closed."""
        assert mode in ("refuse", "reset", "blackhole"), mode
        self._back.clear()
        self.away = mode
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.close(rst=True)
        if mode == "refuse":
            # A listening socket cannot stop listening: close it and bind the port again
            # without listen(), which keeps the port ours while a SYN gets a RST.
            old = self._listener
            old.close()
            # the accept thread's poll() holds the old socket up to 0.1 s more
            deadline = time.monotonic() + 5
            while True:
                try:
                    placeholder = self._bind(self.port)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            placeholder.settimeout(0.1)
            self._listener = placeholder

    def come_back(self):
        if self.away == "refuse":
            self._listener.listen(128)
        self.away = None
        self._back.set()
        # blackholed handlers wake up on _back and close their connection: the client's
        # request fails (it never got an answer) and it reconnects to the store that is back

    # -- rules ---------------------------------------------------------------------------

    def add_rule(self, match, fault, times=None):
        r = Rule(self, match, fault, times)
        with self._lock:
            self._rules.append(r)
        return r

    def remove_rule(self, rule):
        with self._lock:
            if rule in self._rules:
                self._rules.remove(rule)
        rule.fault.release()

    def clear_rules(self):
        with self._lock:
            rules, self._rules = self._rules, []
        for r in rules:
            r.fault.release()

    def release(self):
        """Release every stall of every rule (stalls of later requests too)."""
        with self._lock:
            rules = list(self._rules)
        for r in rules:
            r.fault.release()

    def _pick(self, req):
        with self._lock:
            for r in self._rules:
                if r.exhausted():
                    continue
                try:
                    ok = r.match(req)
                except Exception:
                    ok = False
                if ok:
                    r.hits += 1
                    return r
        return None

    # -- served objects ------------------------------------------------------------------

    def set_object(self, path, data, etag, mtime=None, honour_if_match=True, get_etag=True):
        """Serve @path from memory from now on (HEAD, GET, Range, If-Match)."""
        self._served[path] = Served(bytes(data), etag, time.time() if mtime is None else mtime,
                                    honour_if_match, get_etag)

    def clear_object(self, path):
        self._served.pop(path, None)

    # -- what was seen -------------------------------------------------------------------

    def _record(self, rec):
        with self._lock:
            self._records.append(rec)

    def mark(self):
        with self._lock:
            return len(self._records)

    def records(self, since=0):
        with self._lock:
            return list(self._records[since:])

    def gets(self, path, since=0, first=None, ranged=None):
        """GETs of @path after @since; @first: only the range starting there; @ranged:
        True/False for only/no range requests."""
        out = []
        for r in self.records(since):
            if r.method != "GET" or r.path != path:
                continue
            if first is not None and r.first != first:
                continue
            if ranged is not None and bool(r.range) != ranged:
                continue
            out.append(r)
        return out

    def count(self, path, first=None, since=0):
        return len(self.gets(path, since=since, first=first))

    def in_flight(self):
        with self._lock:
            return sum(1 for r in self._records if r.t_end == 0.0)
