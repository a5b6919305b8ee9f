#!/usr/bin/python3
"""Reference SigV4 signatures for tests/unit/test_sigv4.c, computed by botocore.

For each case below this builds the request the way botocore's S3 client does (object key
percent-encoded with botocore.utils.percent_encode(key, safe='/~'), query string with
percent_encode_sequence()), signs it with botocore.auth.S3SigV4Auth at a fixed time, and prints
the raw inputs together with what botocore produced. The C test signs the same raw inputs with
sigv4_sign() and compares. S3SigV4Auth is the signer the S3 client uses: it signs the path as
sent (no dot-segment removal, no '//' folding, no second encoding) and always adds an
X-Amz-Content-SHA256 header.

Output, one record per case; every value is hex of its UTF-8 bytes, or '-' when empty:

    case <name>
    method GET
    scheme http | https
    hostname <hex>
    port <decimal, 0 if the URL has none>
    region <hex>
    akid <hex>
    secret <hex>
    token <hex>
    time <seconds since epoch>
    date <hex of the x-amz-date botocore used>
    payload <hex of the payload hash botocore signed>
    path <hex of the raw, unencoded path>
    param <hex name> <hex value>         (zero or more, in request order)
    header <hex name> <hex value>        (zero or more extra headers, in request order)
    body <hex of the request body>       (cases with a body: PUT, POST; its SHA-256 signed)
    url <hex of the full URL botocore built>
    creq <hex of botocore's canonical request>
    auth <hex of botocore's Authorization header>
    end

Exit status 77 (and a message on stderr) if botocore cannot be imported.
"""

import base64
import datetime
import hashlib
import sys
import types

try:
    import botocore
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config
    from botocore.credentials import Credentials
    from botocore.utils import percent_encode, percent_encode_sequence
except ImportError as e:
    print(f"sigv4_botocore.py: botocore is not available ({e})", file=sys.stderr)
    sys.exit(77)

FIXED = datetime.datetime(2024, 2, 29, 23, 59, 59)  # a leap day, naive UTC as botocore uses
FIXED_EPOCH = 1709251199

AKID = "AKIDEXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
TOKEN = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ+abc/def=="


class _FixedDatetime(datetime.datetime):
    @classmethod
    def utcnow(cls):
        return FIXED


def _freeze_time():
    fake = types.ModuleType("datetime")
    fake.__dict__.update(datetime.__dict__)
    fake.datetime = _FixedDatetime
    botocore.auth.datetime = fake


class _CapturingAuth(botocore.auth.S3SigV4Auth):
    """S3SigV4Auth that remembers the canonical request it signed."""

    creq = None

    def canonical_request(self, request):
        self.creq = super().canonical_request(request)
        return self.creq


def case(name, path, method="GET", endpoint=("http", "127.0.0.1", 9000), region="us-east-1",
         params=(), headers=(), token=None, unsigned=False, body=None):
    return dict(name=name, path=path, method=method, endpoint=endpoint, region=region,
                params=list(params), headers=list(headers), token=token, unsigned=unsigned,
                body=body)

LOCAL = ("http", "127.0.0.1", 9000)
AWS_VHOST = ("https", "examplebucket.s3.eu-west-1.amazonaws.com", None)
MINIO_TLS = ("https", "minio.example.internal", 8443)
DEFAULT_PORT = ("http", "localhost", 80)
LIST = [("list-type", "2")]


def md5_header(body):
    return [("content-md5", base64.b64encode(hashlib.md5(body).digest()).decode())]


PART_BODY = bytes(range(256)) * 12 + b"\0tail"  # every byte value; its hex fits a line
COMPLETE_BODY = (b'<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                 b'<Part><PartNumber>1</PartNumber><ETag>&quot;a54357aff0632cce46d942af68356b38'
                 b'&quot;</ETag></Part></CompleteMultipartUpload>')
UPLOAD_ID = "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA--"

# The write path's requests (backend/s3write.c): bodies signed with their real SHA-256 and
# Content-MD5 among the signed headers.
BODY_CASES = [
    case("put-object", "/bucket/dïr/o b.bin", method="PUT", body=b"Welcome to Amazon S3.",
         headers=md5_header(b"Welcome to Amazon S3.")),
    case("put-empty-object", "/bucket/empty", method="PUT", body=b"", headers=md5_header(b"")),
    case("upload-part", "/bucket/seg/00000000000000000042.log", method="PUT", body=PART_BODY,
         params=[("partNumber", "3"), ("uploadId", UPLOAD_ID)], headers=md5_header(PART_BODY)),
    case("upload-part-token-tls", "/dir/seg.log", method="PUT", body=PART_BODY,
         endpoint=AWS_VHOST, region="eu-west-1", token=TOKEN,
         params=[("partNumber", "10000"), ("uploadId", UPLOAD_ID)],
         headers=md5_header(PART_BODY)),
    case("create-multipart", "/bucket/seg/a+b.log", method="POST", body=b"",
         params=[("uploads", "")]),
    case("complete-multipart", "/bucket/seg/a+b.log", method="POST", body=COMPLETE_BODY,
         params=[("uploadId", UPLOAD_ID)], headers=md5_header(COMPLETE_BODY)),
    case("abort-multipart", "/bucket/seg/a+b.log", method="DELETE",
         params=[("uploadId", UPLOAD_ID)]),
    case("delete-object", "/bucket/dïr/o b.bin", method="DELETE"),
]



CASES = [
    case("get-plain", "/bucket/logs/plain.log", headers=[("range", "bytes=0-99")]),
    case("get-space", "/bucket/dir one/a b.log", headers=[("range", "bytes=4194304-8388607")]),
    case("get-plus-equals-amp", "/bucket/a+b=c&d,e;f:g@h$i.log",
         headers=[("range", "bytes=0-0")]),
    case("get-percent", "/bucket/100%/x%20y%2F.log", headers=[("range", "bytes=10-19")]),
    case("get-tilde", "/bucket/~user/file~1.txt"),
    case("get-unicode", "/bucket/dïr/ø.log", headers=[("range", "bytes=0-1023")]),
    case("get-cjk-emoji", "/bucket/日志/😀 x.log"),
    case("get-double-slash", "/bucket/a//b///c.log"),
    case("get-leading-slash-key", "/bucket//lead/x"),
    case("get-dot-segments", "/bucket/a/./b/../c/."),
    case("get-query-chars", "/bucket/q?x#y[z]{w}|\"'<>^`\\.log"),
    case("get-trailing-slash", "/bucket/dir/"),
    case("head-plain", "/bucket/logs/plain.log", method="HEAD"),
    case("head-token", "/bucket/dïr/ø.log", method="HEAD", token=TOKEN),
    case("get-range-token", "/bucket/big.bin", token=TOKEN,
         headers=[("range", "bytes=1048576-2097151")]),
    case("get-if-match", "/bucket/seg/00000000000000000042.log",
         headers=[("if-match", "\"9b2cf535f27731c974343645a3985328\""),
                  ("range", "bytes=0-4194303")]),
    case("get-header-whitespace", "/bucket/ws.log",
         headers=[("x-amz-meta-note", "  a   b \t c  "), ("range", " bytes=0-9 ")]),
    case("get-header-repeated", "/bucket/rep.log",
         headers=[("x-amz-meta-r", "one"), ("x-amz-meta-r", "  two   three ")]),
    case("get-default-port", "/bucket/p.log", endpoint=DEFAULT_PORT),
    case("get-tls-port", "/bucket/p.log", endpoint=MINIO_TLS, region="eu-central-1"),
    case("get-vhost-unsigned-payload", "/dir/file.log", endpoint=AWS_VHOST,
         region="eu-west-1", unsigned=True, headers=[("range", "bytes=0-9")]),
    case("list-root", "/bucket", params=LIST + [("delimiter", "/")]),
    case("list-max-keys", "/bucket",
         params=LIST + [("delimiter", "/"), ("max-keys", "1000"), ("prefix", "logs/")]),
    case("list-prefix-special", "/bucket",
         params=LIST + [("prefix", "dïr/sub dir/a+b=c&d%/"), ("delimiter", "/")]),
    case("list-continuation", "/bucket",
         params=LIST + [("prefix", "logs/"), ("delimiter", "/"),
                        ("continuation-token", "1/a+b=c/d==")]),
    case("list-continuation-odd", "/bucket",
         params=LIST + [("continuation-token", "x y%z~w_v-u.t*s!r'q(p)o"),
                        ("prefix", "")]),
    case("list-token-session", "/bucket", token=TOKEN,
         params=LIST + [("continuation-token", "AbC/dEf+GhI=="), ("max-keys", "2")]),
    case("list-encoding-type", "/bucket",
         params=LIST + [("encoding-type", "url"), ("start-after", "a/b c")]),
    case("list-vhost", "/", endpoint=AWS_VHOST, region="eu-west-1",
         params=LIST + [("prefix", "2024/02/29/")]),
    case("list-empty-value", "/bucket", params=[("lifecycle", "")]),
] + BODY_CASES


def hx(s):
    if s is None or len(s) == 0:
        return "-"
    if isinstance(s, str):
        s = s.encode("utf-8")
    return s.hex()


def sign(c):
    scheme, hostname, port = c["endpoint"]
    netloc = hostname if port is None else f"{hostname}:{port}"
    url = f"{scheme}://{netloc}{percent_encode(c['path'], safe='/~')}"
    if c["params"]:
        url += "?" + percent_encode_sequence(c["params"])
    req = AWSRequest(method=c["method"], url=url, data=c["body"])
    for k, v in c["headers"]:
        req.headers[k] = v  # HTTPHeaders appends: a repeated name gets two values
    if c["unsigned"]:
        req.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    elif c["body"] is not None:  # botocore would not sign a body sent over TLS with an MD5
        req.context["client_config"] = Config(s3={"payload_signing_enabled": True})
    auth = _CapturingAuth(Credentials(AKID, SECRET, c["token"]), "s3", c["region"])
    auth.add_auth(req)
    return url, req, auth.creq


def main():
    _freeze_time()
    out = []
    for c in CASES:
        url, req, creq = sign(c)
        scheme, hostname, port = c["endpoint"]
        out.append(f"case {c['name']}")
        out.append(f"method {c['method']}")
        out.append(f"scheme {scheme}")
        out.append(f"hostname {hx(hostname)}")
        out.append(f"port {port or 0}")
        out.append(f"region {hx(c['region'])}")
        out.append(f"akid {hx(AKID)}")
        out.append(f"secret {hx(SECRET)}")
        out.append(f"token {hx(c['token'])}")
        out.append(f"time {FIXED_EPOCH}")
        out.append(f"date {hx(req.headers['X-Amz-Date'])}")
        out.append(f"payload {hx(req.headers['X-Amz-Content-SHA256'])}")
        out.append(f"path {hx(c['path'])}")
        for k, v in c["params"]:
            out.append(f"param {hx(k)} {hx(v)}")
        for k, v in c["headers"]:
            out.append(f"header {hx(k)} {hx(v)}")
        if c["body"] is not None:
            out.append(f"body {hx(c['body'])}")
        out.append(f"url {hx(url)}")
        out.append(f"creq {hx(creq)}")
        out.append(f"auth {hx(req.headers['Authorization'])}")
        out.append("end")
    print("\n".join(out))


if __name__ == "__main__":
    main()
