"""A small S3 of the tests' own, for what s3rver cannot show: the write path's requests one by
one, AbortMultipartUpload (s3rver answers 405), If-None-Match on writes (s3rver ignores it),
and faults injected into single requests.

    fake = FakeS3().start()                  # 127.0.0.1, a free port, bucket "b"
    fake.add_rule("part", faults.status(500), part=2)        # part 2 fails once
    ... run tierfs's backend against fake.endpoint ...
    assert fake.ops() == ["create", "part", "part", "part", "complete"]
    fake.stop()

It speaks path-style S3 and just enough of it: PutObject, CreateMultipartUpload, UploadPart,
CompleteMultipartUpload, AbortMultipartUpload, DeleteObject, GET (Range, If-Match), HEAD, and
ListObjectsV2 in one page (so that a tierfs mount can stand on it: "bucket" in add_rule).
Every request must be signed with SigV4 by FakeS3.KEY / FakeS3.SECRET, and the signature is
checked here (s3rver checks none): the canonical request is rebuilt from what arrived, the
x-amz-content-sha256 it signs must be the SHA-256 of the body that arrived, and Content-MD5,
when sent, its MD5. A request that fails a check gets S3's error for it (403
SignatureDoesNotMatch, 400 XAmzContentSHA256Mismatch, 400 BadDigest) and is recorded with it.
Stricter than S3, which takes any body as UNSIGNED-PAYLOAD: here that payload needs a signed
Content-MD5 (tierfs's rule: no body without a check of its bytes), else 400 UnprotectedBody.
Like S3, parts but the last must be 5 MiB or more at Complete, a multipart object's ETag is
the MD5 of its parts' MD5s with "-N", and "If-None-Match: *" on PutObject or Complete is
answered 412 when the key exists.

A rule (add_rule) matches an operation ("put", "create", "part", "complete", "abort",
"delete", "get", "head"), optionally one part number, and applies its fault to the next
@times matching requests (None: all). Faults:

    status(code, s3code)  answer that error without doing anything
    error200(s3code)      Complete only: do nothing, answer 200 with an <Error> body, as S3
                          does when a Complete fails after it sent its status
    delay(seconds)        wait, then do the operation and answer as usual
    hang(seconds)         read the request, wait, then close the connection unanswered
    reset()               read the request, close the connection unanswered
    lose_answer()         do the operation, then close the connection unanswered
    bad_etag()            do the operation, answer with a wrong ETag
    gate(event)           wait until @event is set (30 s at most), then as usual
    rgw16(event=None)     Complete only: as Ceph RGW 16 does it, If-None-Match ignored and an
                          empty <ETag></ETag> in the answer (after waiting for @event if given)
"""

import base64
import email.utils
import hashlib
import hmac
import http.server
import re
import threading
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from types import SimpleNamespace

MIB = 1 << 20
S3NS = "http://s3.amazonaws.com/doc/2006-03-01/"


@dataclass
class Record:
    op: str
    method: str
    path: str  # as sent, without the query
    query: dict
    headers: dict  # lower-case names, the last value of each
    body_len: int
    status: int = 0
    fault: str = ""
    signed: bool = False  # the signature checked out
    part: int = 0


@dataclass
class Rule:
    op: str
    fault: tuple
    times: object = 1  # None: every time
    part: int = 0
    hits: int = 0


faults = SimpleNamespace(
    status=lambda code, s3code="InternalError": ("status", code, s3code),
    error200=lambda s3code="InternalError": ("error200", s3code),
    delay=lambda seconds: ("delay", seconds),
    hang=lambda seconds: ("hang", seconds),
    reset=lambda: ("reset",),
    lose_answer=lambda: ("lose_answer",),
    bad_etag=lambda: ("bad_etag",),
    gate=lambda event: ("gate", event),
    rgw16=lambda event=None: ("rgw16", event),
)


def _error_doc(code, msg=""):
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{msg or code}</Message><RequestId>fakes3</RequestId></Error>").encode()


def _uri_encode(s):
    return urllib.parse.quote(s, safe="-_.~")


def _canonical_query(raw):
    pairs = []
    for item in raw.split("&") if raw else []:
        k, _, v = item.partition("=")
        pairs.append((_uri_encode(urllib.parse.unquote(k)), _uri_encode(urllib.parse.unquote(v))))
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


class FakeS3:
    KEY = "AKIDFAKES3"
    SECRET = "fake/secret+key"
    BUCKET = "b"

    def __init__(self, region="us-east-1"):
        self.region = region
        self.lock = threading.Lock()
        self.objects = {}  # key -> SimpleNamespace(data, etag, mtime)
        self.uploads = {}  # upload id -> SimpleNamespace(key, parts {n: (data, etag)})
        self.aborted = []  # upload ids aborted
        self.records = []
        self.rules = []
        self.release = threading.Event()  # ends every hang at once (stop)
        self.server = None

    # -- the test's side ---------------------------------------------------------------------

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self):
        fake = self

        class Handler(_Handler):
            s3 = fake

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.release.set()
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def add_rule(self, op, fault, times=1, part=0):
        r = Rule(op, fault, times, part)
        with self.lock:
            self.rules.append(r)
        return r

    def ops(self):
        with self.lock:
            return [r.op for r in self.records]

    def put_object(self, key, data):
        with self.lock:
            etag = f'"{hashlib.md5(data).hexdigest()}"'
            self.objects[key] = SimpleNamespace(data=data, etag=etag, mtime=time.time())

    # -- the server's side (called by the handler) --------------------------------------------

    def take_fault(self, op, part):
        with self.lock:
            for r in self.rules:
                if r.op == op and (not r.part or r.part == part) and \
                        (r.times is None or r.hits < r.times):
                    r.hits += 1
                    return r.fault
        return None

    def check_signature(self, h, method, path, rawq, body):
        """None if @h's SigV4 signature and payload hash are right, else (status, code)."""
        m = re.fullmatch(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/s3/aws4_request,"
                         r" ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})",
                         h.get("authorization", ""))
        if not m or m.group(1) != self.KEY or m.group(3) != self.region:
            return 403, "SignatureDoesNotMatch"
        date, signed, sig = m.group(2), m.group(4).split(";"), m.group(5)
        payload = h.get("x-amz-content-sha256", "")
        if payload == "UNSIGNED-PAYLOAD":
            if "content-md5" not in h or "content-md5" not in signed:
                return 400, "UnprotectedBody"
        elif payload != hashlib.sha256(body).hexdigest():
            return 400, "XAmzContentSHA256Mismatch"
        if "content-md5" in h and \
                h["content-md5"] != base64.b64encode(hashlib.md5(body).digest()).decode():
            return 400, "BadDigest"
        canon_headers = "".join(
            f"{n}:{' '.join(h.get(n, '').split())}\n" for n in signed)
        creq = "\n".join([method, path, _canonical_query(rawq), canon_headers, ";".join(signed),
                          payload])
        scope = f"{date}/{self.region}/s3/aws4_request"
        sts = "\n".join(["AWS4-HMAC-SHA256", h.get("x-amz-date", ""), scope,
                         hashlib.sha256(creq.encode()).hexdigest()])
        k = _hmac(("AWS4" + self.SECRET).encode(), date)
        for part in (self.region, "s3", "aws4_request"):
            k = _hmac(k, part)
        want = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
        if not {"host", "x-amz-date", "x-amz-content-sha256"} <= set(signed) or want != sig:
            return 403, "SignatureDoesNotMatch"
        return None


def _op_of(method, q, key):
    if method == "POST" and "uploads" in q:
        return "create"
    if method == "POST" and "uploadId" in q:
        return "complete"
    if method == "PUT" and "uploadId" in q:
        return "part"
    if method == "DELETE" and "uploadId" in q:
        return "abort"
    return {"PUT": "put", "DELETE": "delete", "GET": "get", "HEAD": "head"}.get(method, "?") \
        if key else "bucket"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    s3 = None  # the FakeS3, set by a subclass

    def log_message(self, *args):
        pass

    # -- plumbing ------------------------------------------------------------------------------

    def _answer(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.rec.status = status

    def _error(self, status, code):
        self._answer(status, _error_doc(code), [("Content-Type", "application/xml")])

    def _handle(self):
        s3 = self.s3
        raw_path, _, rawq = self.path.partition("?")
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(rawq, keep_blank_values=True).items()}
        body = self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
        h = {k.lower(): v for k, v in self.headers.items()}
        bucket, _, key = urllib.parse.unquote(raw_path).lstrip("/").partition("/")
        op = _op_of(self.command, q, key)
        part = int(q.get("partNumber", "0") or 0)
        self.rec = Record(op, self.command, raw_path, q, h, len(body), part=part)
        with s3.lock:
            s3.records.append(self.rec)
        bad = s3.check_signature(h, self.command, raw_path, rawq, body)
        if bad:
            return self._error(*bad)
        self.rec.signed = True
        if bucket != s3.BUCKET:
            return self._error(404, "NoSuchBucket")
        fault = s3.take_fault(op, part)
        self.rec.fault = fault[0] if fault else ""
        if fault and fault[0] == "status":
            return self._error(fault[1], fault[2])
        if fault and fault[0] in ("hang", "reset"):
            if fault[0] == "hang":
                s3.release.wait(fault[1])
            self.close_connection = True
            return None
        if fault and fault[0] == "delay":
            s3.release.wait(fault[1])
        if fault and fault[0] in ("gate", "rgw16") and fault[1] is not None:
            fault[1].wait(30)
        if fault and fault[0] == "error200" and op == "complete":
            return self._answer(200, _error_doc(fault[1]), [("Content-Type", "application/xml")])
        getattr(self, "_op_" + op, self._op_unknown)(key, q, h, body, fault)
        if fault and fault[0] == "lose_answer":
            self.close_connection = True
        return None

    def _send_or_lose(self, fault, status, body=b"", headers=()):
        if fault and fault[0] == "lose_answer":
            self.rec.status = 0
            return
        if fault and fault[0] == "bad_etag":
            headers = [(k, '"00000000000000000000000000000000"' if k == "ETag" else v)
                       for k, v in headers]
        self._answer(status, body, headers)

    def do_GET(self):
        self._handle()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    # -- operations ----------------------------------------------------------------------------

    def _op_unknown(self, key, q, h, body, fault):
        self._error(501, "NotImplemented")

    def _op_bucket(self, key, q, h, body, fault):
        """ListObjectsV2 (list-type=2, prefix, delimiter; one page): enough for a mount to
        stand on the fake (backend_check lists the root; directories are listed)."""
        if self.command != "GET" or q.get("list-type") != "2":
            return self._op_unknown(key, q, h, body, fault)
        pre, delim = q.get("prefix", ""), q.get("delimiter", "")
        with self.s3.lock:
            objs = sorted((k, o) for k, o in self.s3.objects.items() if k.startswith(pre))
        keys, prefixes = [], []
        for k, o in objs:
            rest = k[len(pre):]
            if delim and delim in rest:
                cp = pre + rest.split(delim, 1)[0] + delim
                if cp not in prefixes:
                    prefixes.append(cp)
            else:
                keys.append((k, o))
        esc = lambda t: t.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")
        doc = (f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="{S3NS}">'
               f"<Name>{self.s3.BUCKET}</Name><Prefix>{esc(pre)}</Prefix>"
               f"<KeyCount>{len(keys) + len(prefixes)}</KeyCount><IsTruncated>false"
               "</IsTruncated>" +
               "".join(f"<Contents><Key>{esc(k)}</Key><LastModified>"
                       f"{time.strftime('%Y-%m-%dT%H:%M:%S.000Z', time.gmtime(o.mtime))}"
                       f"</LastModified><ETag>{esc(o.etag)}</ETag><Size>{len(o.data)}</Size>"
                       "</Contents>" for k, o in keys) +
               "".join(f"<CommonPrefixes><Prefix>{esc(c)}</Prefix></CommonPrefixes>"
                       for c in prefixes) + "</ListBucketResult>").encode()
        self._send_or_lose(fault, 200, doc, [("Content-Type", "application/xml")])

    def _exists_refused(self, key, h):
        if h.get("if-none-match") == "*" and key in self.s3.objects:
            self._error(412, "PreconditionFailed")
            return True
        return False

    def _op_put(self, key, q, h, body, fault):
        s3 = self.s3
        with s3.lock:
            if self._exists_refused(key, h):
                return
            etag = f'"{hashlib.md5(body).hexdigest()}"'
            s3.objects[key] = SimpleNamespace(data=body, etag=etag, mtime=time.time())
        self._send_or_lose(fault, 200, b"", [("ETag", etag)])

    def _op_create(self, key, q, h, body, fault):
        uid = uuid.uuid4().hex
        with self.s3.lock:
            self.s3.uploads[uid] = SimpleNamespace(key=key, parts={})
        doc = (f'<?xml version="1.0" encoding="UTF-8"?>\n<InitiateMultipartUploadResult '
               f'xmlns="{S3NS}"><Bucket>{self.s3.BUCKET}</Bucket><Key>{key}</Key>'
               f"<UploadId>{uid}</UploadId></InitiateMultipartUploadResult>").encode()
        self._send_or_lose(fault, 200, doc, [("Content-Type", "application/xml")])

    def _op_part(self, key, q, h, body, fault):
        with self.s3.lock:
            up = self.s3.uploads.get(q["uploadId"])
            if not up or up.key != key:
                return self._error(404, "NoSuchUpload")
            etag = f'"{hashlib.md5(body).hexdigest()}"'
            up.parts[int(q["partNumber"])] = (body, etag)
        self._send_or_lose(fault, 200, b"", [("ETag", etag)])

    def _op_complete(self, key, q, h, body, fault):
        s3 = self.s3
        try:
            root = ET.fromstring(body)
            listed = [(int(p.findtext(f"{{{S3NS}}}PartNumber")), p.findtext(f"{{{S3NS}}}ETag"))
                      for p in root.findall(f"{{{S3NS}}}Part")]
        except (ET.ParseError, TypeError, ValueError):
            return self._error(400, "MalformedXML")
        with s3.lock:
            up = s3.uploads.get(q["uploadId"])
            if not up or up.key != key:
                return self._error(404, "NoSuchUpload")
            nums = [n for n, _ in listed]
            if not listed or nums != sorted(set(nums)) or \
                    any(n not in up.parts or up.parts[n][1] != e for n, e in listed):
                return self._error(400, "InvalidPart")
            if any(len(up.parts[n][0]) < 5 * MIB for n in nums[:-1]):
                return self._error(400, "EntityTooSmall")
            rgw16 = bool(fault) and fault[0] == "rgw16"
            if not rgw16 and self._exists_refused(key, h):
                return None
            data = b"".join(up.parts[n][0] for n in nums)
            md5s = b"".join(hashlib.md5(up.parts[n][0]).digest() for n in nums)
            etag = f'"{hashlib.md5(md5s).hexdigest()}-{len(nums)}"'
            s3.objects[key] = SimpleNamespace(data=data, etag=etag, mtime=time.time())
            del s3.uploads[q["uploadId"]]
        doc = (f'<?xml version="1.0" encoding="UTF-8"?>\n<CompleteMultipartUploadResult '
               f'xmlns="{S3NS}"><Location>{self.s3.endpoint}/{key}</Location><Bucket>'
               f"{s3.BUCKET}</Bucket><Key>{key}</Key><ETag>"
               f"{'' if rgw16 else etag.replace(chr(34), '&quot;')}"
               f"</ETag></CompleteMultipartUploadResult>").encode()
        self._send_or_lose(fault, 200, doc, [("Content-Type", "application/xml")])

    def _op_abort(self, key, q, h, body, fault):
        with self.s3.lock:
            if self.s3.uploads.pop(q["uploadId"], None) is None:
                return self._error(404, "NoSuchUpload")
            self.s3.aborted.append(q["uploadId"])
        self._send_or_lose(fault, 204)

    def _op_delete(self, key, q, h, body, fault):
        with self.s3.lock:
            self.s3.objects.pop(key, None)
        self._send_or_lose(fault, 204)

    def _op_head(self, key, q, h, body, fault):
        self._op_get(key, q, h, body, fault)

    def _op_get(self, key, q, h, body, fault):
        with self.s3.lock:
            o = self.s3.objects.get(key)
        if not o:
            return self._error(404, "NoSuchKey")
        if h.get("if-match") and h["if-match"] != o.etag:
            return self._error(412, "PreconditionFailed")
        hdrs = [("ETag", o.etag), ("Last-Modified", email.utils.formatdate(o.mtime, usegmt=True))]
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", h.get("range", ""))
        if m and self.command == "GET":
            a, b = int(m.group(1)), min(int(m.group(2)), len(o.data) - 1)
            hdrs.append(("Content-Range", f"bytes {a}-{b}/{len(o.data)}"))
            return self._answer(206, o.data[a:b + 1], hdrs)
        if self.command == "HEAD":
            self.send_response(200)
            for k, v in hdrs + [("Content-Length", str(len(o.data)))]:
                self.send_header(k, v)
            self.end_headers()
            self.rec.status = 200
            return None
        return self._answer(200, o.data, hdrs)
