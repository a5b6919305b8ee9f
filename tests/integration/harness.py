"""Processes the integration tests run: nginx, s3rver and tierfs mounts, on loopback only.

Every wait here polls a condition against a deadline; nothing sleeps in place of a condition.
Every process started here is stopped by its owner (a fixture's teardown), and every mount is
recorded so that a session-end safety net can unmount whatever a crashed test left behind.
"""

import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import NamedTuple

B64K = 64 * 1024
B4M = 4 * 1024 * 1024
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# Variables that would send the program's requests somewhere else than where the test says.
SCRUB_ENV = (
    "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
    "no_proxy", "NO_PROXY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
)


def tierfs_bin():
    return os.environ.get("TIERFS_BIN") or str(REPO / "build" / "tierfs")


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in SCRUB_ENV}
    env.update(extra or {})
    return env


def ctl_address(mnt):
    """A mount's control socket (fs/ctlsock.c): abstract, named by FNV-1a of its real path."""
    h = 0xcbf29ce484222325
    for b in os.path.realpath(mnt).encode():
        h = ((h ^ b) * 0x100000001b3) & (2**64 - 1)
    return b"\0tierfs-ctl:%016x" % h


def live_set(mnt, name, value):
    """Change live option @name to @value on the mount at @mnt, as `tierfs set` does, through
    its control socket (a mount without allow_* flags is read-only in the kernel: setxattr
    never reaches it). Raises OSError with the errno the mount answered."""
    import socket
    v = value.decode() if isinstance(value, bytes) else str(value)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(ctl_address(mnt))
        s.sendall(f"set {name} {v}\n".encode())
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = s.recv(512)
            if not chunk:
                break
            reply += chunk
    reply = reply.decode().strip()
    if reply == "ok":
        return
    parts = reply.split(" ", 2)
    if len(parts) < 2 or parts[0] != "error":
        raise OSError(errno.EPROTO, f"control socket: {reply!r}")
    raise OSError(int(parts[1]), parts[2] if len(parts) > 2 else "")


def wait_until(pred, timeout, what, interval=0.02):
    """Poll @pred until it returns a true value (returned) or @timeout seconds pass (raises)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def tail(path, n=4000):
    try:
        return Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""


def wait_for_port(port, proc, what, log=None, timeout=20):
    def ready():
        if proc.poll() is not None:
            raise RuntimeError(
                f"{what} exited with status {proc.returncode} before listening on {port}:\n"
                + (tail(log) if log else "")
            )
        return port_open(port)

    wait_until(ready, timeout, f"{what} to listen on 127.0.0.1:{port}")


def stop_process(proc, timeout=10):
    """terminate, wait, kill. Works on a stopped (SIGSTOP) process too."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------------------------------------
# TLS


def make_cert(directory):
    """A self-signed certificate for 127.0.0.1 and localhost. Return (cert path, key path)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


# ---------------------------------------------------------------------------------------------
# nginx


class Request(NamedTuple):
    method: str
    uri: str  # as sent, percent-encoded, query included
    path: str  # decoded path without the query, relative to the root, no leading '/'
    range: str  # the Range header, "" if none
    if_match: str  # the If-Match header (nginx logs '"' as \x22), "" if none
    status: int
    body_bytes: int

    def byte_range(self, size):
        """(first, last) of a "bytes=a-b" / "bytes=a-" Range against @size; None otherwise."""
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.range)
        if not m:
            return None
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else size - 1
        return first, min(last, size - 1)


LOG_RE = re.compile(r'^(\S+) "([^"]*)" "([^"]*)" "([^"]*)" (\d+) (\d+)$')
STATUS_URI = "/__tierfs_test_nginx_status"
# The test's own HTTP requests go straight to loopback whatever proxy the environment names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))

NGINX_CONF = """\
daemon off;
# One process: nothing drops privileges (the corpus lives in 0700 temporary directories) and
# killing the pid kills the whole server.
master_process off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{ worker_connections 512; }}
http {{
    default_type application/octet-stream;
    log_format tierfs '$request_method "$request_uri" "$http_range" "$http_if_match" $status $body_bytes_sent';
    access_log {prefix}/access.log tierfs;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    {extra_temp}
    sendfile on;
    keepalive_requests 100000;
    keepalive_timeout 60s;
    server {{
        listen 127.0.0.1:{port};
        {https_listen}
        server_name localhost;
        root {root};
        autoindex on;
        autoindex_format json;
        etag on;
        {ssl}
        {status}
    }}
}}
"""


def nginx_has(module):
    out = subprocess.run(["nginx", "-V"], capture_output=True, text=True).stderr
    return module in out


class Nginx:
    """nginx serving @root on 127.0.0.1 over HTTP, and over HTTPS when @tls=(cert, key)."""

    def __init__(self, root, workdir, tls=None):
        self.root = Path(root)
        self.dir = Path(workdir)
        self.tls = tls
        self.proc = None
        self.port = self.https_port = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/"

    @property
    def https_url(self):
        return f"https://127.0.0.1:{self.https_port}/"

    @property
    def access_log(self):
        return self.dir / "access.log"

    def _conf(self):
        https_listen = ssl = ""
        if self.tls:
            https_listen = f"listen 127.0.0.1:{self.https_port} ssl;"
            ssl = f"ssl_certificate {self.tls[0]};\n        ssl_certificate_key {self.tls[1]};"
        extra_temp = ""
        v = subprocess.run(["nginx", "-V"], capture_output=True, text=True).stderr
        if "--without-http_uwsgi_module" not in v:
            extra_temp += f"uwsgi_temp_path {self.dir}/tmp/uwsgi; "
        if "--without-http_scgi_module" not in v:
            extra_temp += f"scgi_temp_path {self.dir}/tmp/scgi;"
        status = ""
        if "http_stub_status_module" in v:
            status = f"location = {STATUS_URI} {{ stub_status; access_log off; }}"
        self.has_status = bool(status)
        return NGINX_CONF.format(prefix=self.dir, port=self.port, https_listen=https_listen,
                                 root=self.root, ssl=ssl, status=status, extra_temp=extra_temp)

    def start(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "tmp").mkdir(exist_ok=True)
        last = None
        for _ in range(3):  # a picked port can be taken by someone else before nginx binds it
            self.port = free_port()
            self.https_port = free_port() if self.tls else None
            conf = self.dir / "nginx.conf"
            conf.write_text(self._conf())
            out = open(self.dir / "stderr.log", "ab")
            self.proc = subprocess.Popen(
                ["nginx", "-c", str(conf), "-p", str(self.dir)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
            )
            out.close()
            try:
                wait_for_port(self.port, self.proc, "nginx", self.dir / "error.log")
                if self.tls:
                    wait_for_port(self.https_port, self.proc, "nginx", self.dir / "error.log")
                return self
            except RuntimeError as e:
                last = e
                stop_process(self.proc)
        raise RuntimeError(f"nginx did not start: {last}")

    def stop(self):
        stop_process(self.proc)

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=10)

    # -- the access log --------------------------------------------------------------------

    def log_mark(self):
        """An offset into the access log: requests(since=mark) returns what came after."""
        try:
            return self.access_log.stat().st_size
        except FileNotFoundError:
            return 0

    def requests(self, since=0):
        out = []
        try:
            with open(self.access_log, "rb") as f:
                f.seek(since)
                raw = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return out
        for line in raw.splitlines():
            m = LOG_RE.match(line)
            if not m:
                continue
            method, uri, rng, ifm, status, nbytes = m.groups()
            path = urllib.parse.unquote(uri.split("?", 1)[0]).lstrip("/")
            rng = "" if rng == "-" else rng
            ifm = "" if ifm == "-" else ifm
            out.append(Request(method, uri, path, rng, ifm, int(status), int(nbytes)))
        return out

    def gets(self, rel, since=0):
        return [r for r in self.requests(since) if r.method == "GET" and r.path == rel]

    def etag(self, rel):
        """The ETag nginx sends for @rel (quotes included)."""
        req = urllib.request.Request(self.url + urllib.parse.quote(rel), method="HEAD")
        with _DIRECT.open(req, timeout=5) as r:
            return r.headers["ETag"]

    def writing(self):
        """Requests in progress (not counting the status request itself), from stub_status."""
        with _DIRECT.open(f"http://127.0.0.1:{self.port}{STATUS_URI}", timeout=5) as r:
            body = r.read().decode()
        m = re.search(r"Writing: (\d+)", body)
        return int(m.group(1)) - 1

    def wait_idle(self, timeout=15):
        """Wait until nginx has no request in progress, so every request is in the log."""
        if not getattr(self, "has_status", False):
            return
        wait_until(lambda: self.writing() == 0, timeout, "nginx to finish all requests")


def range_blocks(reqs, block):
    """The blocks (of @block bytes) the range GETs in @reqs asked for, sorted, with repeats:
    a block asked for twice is listed twice. tierfs sends consecutive blocks read together as
    one range request (up to 16 MiB), so count blocks, not requests."""
    out = []
    for r in reqs:
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", r.range.strip())
        assert m, f"not a closed byte range: {r.range!r}"
        out.extend(range(int(m.group(1)) // block, int(m.group(2)) // block + 1))
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# s3rver


S3_KEY = "S3RVER"  # s3rver's built-in account (it checks the key id, not SigV4 signatures)
BUCKET = "tierfs-test"
S3_ENV = {"AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_KEY}


def s3_options(srv):
    """Mount options that point tierfs at @srv."""
    return [f"endpoint={srv.endpoint}", "path_style", "region=us-east-1"]


def s3rver_js():
    return HERE / "node_modules" / "s3rver" / "bin" / "s3rver.js"


class S3rver:
    kind = "s3rver"
    env = S3_ENV  # the credentials a mount of it needs

    def __init__(self, workdir):
        self.dir = Path(workdir)
        self.proc = None
        self.port = None

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        js = s3rver_js()
        if not js.exists():
            raise RuntimeError(f"{js} is missing: run scripts/bootstrap")
        node = shutil.which("node") or "/usr/bin/node"
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        last = None
        for _ in range(3):
            self.port = free_port()
            log = self.dir / "s3rver.log"
            out = open(log, "ab")
            # --openssl-legacy-provider: without it, paginated ListObjectsV2 answers 500 on
            # Node 17+ (s3rver's continuation tokens use a legacy cipher).
            self.proc = subprocess.Popen(
                [node, "--openssl-legacy-provider", str(js), "--address", "127.0.0.1",
                 "--port", str(self.port), "--directory", str(data), "--silent"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
            )
            out.close()
            try:
                wait_for_port(self.port, self.proc, "s3rver", log, timeout=30)
                return self
            except RuntimeError as e:
                last = e
                stop_process(self.proc)
        raise RuntimeError(f"s3rver did not start: {last}")

    def stop(self):
        stop_process(self.proc)

    def client(self):
        import botocore.session
        from botocore.config import Config

        s = botocore.session.get_session()
        return s.create_client(
            "s3", region_name="us-east-1", endpoint_url=self.endpoint,
            aws_access_key_id=S3_KEY, aws_secret_access_key=S3_KEY,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3},
                          max_pool_connections=16, proxies={}),
        )

    def upload_tree(self, bucket, root, prefix=""):
        """Create @bucket and put every file under @root in it (see upload_tree)."""
        return upload_tree(self.client(), bucket, root, prefix)


def upload_tree(c, bucket, root, prefix=""):
    """Create @bucket with the botocore client @c and put every file under @root as @prefix +
    relative path. Return {key: (size, LastModified in whole seconds)} as the bucket lists
    them."""
    from concurrent.futures import ThreadPoolExecutor

    c.create_bucket(Bucket=bucket)
    items = []
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            items.append((prefix + os.path.relpath(p, root), p))

    def put(item):
        key, p = item
        with open(p, "rb") as f:
            c.put_object(Bucket=bucket, Key=key, Body=f.read())

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(put, items))
    keys = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            keys[o["Key"]] = (o["Size"], int(o["LastModified"].timestamp()))
    want = {k for k, _ in items}
    if set(keys) != want:
        raise RuntimeError(f"the store lists {len(keys)} keys after uploading {len(want)}: "
                           f"missing {sorted(want - set(keys))[:5]}, "
                           f"extra {sorted(set(keys) - want)[:5]}")
    return keys


# ---------------------------------------------------------------------------------------------
# tierfs


def fuse_usable():
    """None if /dev/fuse can be opened, else the reason it cannot."""
    try:
        fd = os.open("/dev/fuse", os.O_RDWR)
    except OSError as e:
        return f"/dev/fuse is unusable: {e}"
    os.close(fd)
    return None


# ---------------------------------------------------------------------------------------------
# sanitizers
#
# scripts/test runs this suite again against tierfs built with AddressSanitizer + UBSan and
# with ThreadSanitizer. A daemonized tierfs has its stderr on /dev/null, so every tierfs
# started here gets *SAN_OPTIONS with log_path=DIR/san: a report lands in DIR/san.PID, PID
# being the process that wrote it (launcher or daemon). Each mount has a directory of its own
# (san-<mount point name> beside its log), so any file in it is that mount's, and
# Mount.unmount() - after the server has exited, which is when LeakSanitizer reports - makes it
# a problem that fails the test. run_tierfs() checks its own. conftest's session end sweeps up
# any report that was not turned into a failure (a server nobody unmounted). A program built
# without sanitizers ignores the variables.

ASAN_SUPP = REPO / "tests" / "asan.supp"
TSAN_SUPP = REPO / "tests" / "tsan.supp"
SAN_QUOTE = 6000  # characters of each report quoted in a failure message
SAN_ROOT = None  # where run_tierfs() makes its report directories (conftest: under basetemp)
san_reported = set()  # report files already turned into a failure


def sanitizer_env(sandir):
    """ASAN_OPTIONS, UBSAN_OPTIONS, TSAN_OPTIONS for a tierfs whose reports must go to
    @sandir/san.PID (created here). ASan also checks leaks at exit; UBSan stops at the first
    error; TSan goes on and exits 66 (the report files are what counts: a daemon's exit status
    reaches no one). Options already in the environment come after these, so a developer can
    change any of them but log_path. LSAN_OPTIONS is passed through as it is."""
    sandir = Path(sandir)
    sandir.mkdir(parents=True, exist_ok=True)
    log = f"log_path={sandir / 'san'}"
    asan = "detect_leaks=1:halt_on_error=1:exitcode=86:handle_abort=1"
    if ASAN_SUPP.is_file():
        asan += f":suppressions={ASAN_SUPP}"
    tsan = "halt_on_error=0:exitcode=66:second_deadlock_stack=1:history_size=4"
    if TSAN_SUPP.is_file():
        tsan += f":suppressions={TSAN_SUPP}"
    ours = {
        "ASAN_OPTIONS": asan,
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:report_error_type=1",
        "TSAN_OPTIONS": tsan,
    }
    return {k: ":".join(filter(None, (v, os.environ.get(k, ""), log))) for k, v in ours.items()}


_sanitizer_of = {}


def sanitizer():
    """The sanitizer the tierfs under test was built with: "asan" (AddressSanitizer, with UBSan
    in scripts/test), "tsan" or None. For the few bounds that a sanitizer's own cost breaks:
    its shadow memory in a peak RSS, its slowdown in the work done in a fixed time."""
    b = tierfs_bin()
    if b not in _sanitizer_of:
        try:
            data = Path(b).read_bytes()
        except OSError:
            data = b""
        _sanitizer_of[b] = ("asan" if b"__asan_init" in data else
                            "tsan" if b"__tsan_init" in data else None)
    return _sanitizer_of[b]


def tierfs_env(env, sandir):
    """The environment tierfs runs in: ours without SCRUB_ENV, sanitizer_env(@sandir), @env."""
    return clean_env({**sanitizer_env(sandir), **(env or {})})


def sanitizer_reports(sandir):
    """Describe the reports in @sandir (files san.PID) not described before; None if none."""
    try:
        files = sorted(Path(sandir).glob("san.*"), key=lambda f: f.stat().st_mtime)
    except OSError:
        return None
    files = [f for f in files if os.path.realpath(f) not in san_reported]
    if not files:
        return None
    out = []
    for f in files:
        san_reported.add(os.path.realpath(f))
        text = f.read_text(errors="replace")
        more = f"\n[... {len(text) - SAN_QUOTE} more characters in {f}]" \
            if len(text) > SAN_QUOTE else ""
        out.append(f"sanitizer report {f} (pid {f.suffix[1:]}):\n{text[:SAN_QUOTE]}{more}")
    return "\n".join(out)


class SanitizerReport(AssertionError):
    pass


def run_tierfs(args, env=None, timeout=30, cwd=None, sandir=None):
    """Run the program to completion; stderr goes to a file, not a pipe (a daemon that kept a
    pipe open would keep us waiting). Return (returncode, stdout, stderr lines). Sanitizer
    reports go to @sandir, which the caller then checks; without @sandir they go to a fresh
    directory checked here, and any report raises SanitizerReport."""
    import tempfile

    own = sandir is None
    if own:
        if SAN_ROOT:
            os.makedirs(SAN_ROOT, exist_ok=True)
        sandir = tempfile.mkdtemp(prefix="san-", dir=SAN_ROOT)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.run([tierfs_bin()] + list(args), stdin=subprocess.DEVNULL, stdout=out,
                           stderr=err, env=tierfs_env(env, sandir), timeout=timeout, cwd=cwd)
        out.seek(0)
        err.seek(0)
        ret = (p.returncode, out.read().decode("utf-8", "replace"),
               err.read().decode("utf-8", "replace").splitlines())
    if own:
        found = sanitizer_reports(sandir)
        if found:
            raise SanitizerReport(f"tierfs {' '.join(map(str, args))}: {found}")
        try:
            os.rmdir(sandir)  # empty unless a daemon it started still runs
        except OSError:
            pass
    return ret


def mounted(mnt):
    """Is @mnt a mount point? (from /proc/self/mountinfo: os.path.ismount stats the path,
    which can hang on a dead FUSE server)."""
    mnt = os.path.realpath(mnt)
    for entry in mountinfo():
        if entry == mnt:
            return True
    return False


def mountinfo():
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            # mount point is field 5, with octal escapes for space, tab, newline, backslash
            mp = line.split()[4]
            out.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), mp))
    return out


def daemon_pids(mnt):
    """Pids of tierfs processes whose command line names @mnt."""
    pids = []
    name = os.path.basename(tierfs_bin())
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or os.path.basename(argv[0].decode(errors="replace")) != name:
            continue
        if os.fsencode(str(mnt)) in argv:
            pids.append(int(d))
    return pids


def pid_alive(pid):
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return st.rsplit(")", 1)[1].split()[0] != "Z"


def fusermount_u(mnt, lazy=False):
    args = ["fusermount3", "-uz" if lazy else "-u", str(mnt)]
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return 124, f"{' '.join(args)} did not return in 30 s"
    return p.returncode, p.stderr.strip()


def force_unmount(mnt, tries=5):
    """Unmount @mnt; retry a busy unmount a few times, then unmount lazily and kill the server.
    Return None if a plain unmount worked (or nothing was mounted), else a description."""
    if not mounted(mnt):
        return None
    err = ""
    for i in range(tries):
        rc, err = fusermount_u(mnt)
        if rc == 0 or not mounted(mnt):
            return None
        # Busy (an open file) usually clears as soon as the test's reader closes it.
        try:
            wait_until(lambda: not mounted(mnt), 0.2 * (i + 1), "unmount")
            return None
        except TimeoutError:
            pass
    pids = daemon_pids(mnt)
    rc, err2 = fusermount_u(mnt, lazy=True)
    for pid in pids:  # a lazily unmounted server would keep the connection (and readers) alive
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return f"fusermount3 -u {mnt} failed ({err}); lazy unmount: rc={rc} {err2}"


class MountError(Exception):
    pass


class Mount:
    """One tierfs mount. start() mounts (daemonized, or -f under Popen); unmount() unmounts."""

    registry = []

    def __init__(self, url, mountpoint, options=(), env=None, foreground=False, logdir=None):
        self.url = url
        self.mnt = Path(mountpoint)
        self.options = list(options)
        self.env = env
        self.foreground = foreground
        self.logdir = Path(logdir) if logdir else self.mnt.parent
        self.proc = None
        self.stderr = []
        self.pids = []
        self.unmounted = False
        self.mounted_at_exit = None  # daemonized: was it mounted when the program exited?
        self.sandir = self.logdir / f"san-{self.mnt.name}"  # sanitizer reports (see above)

    def argv(self):
        a = [self.url, str(self.mnt)]
        if self.options:
            a += ["-o", ",".join(self.options)]
        if self.foreground:
            a.append("-f")
        return a

    @property
    def log(self):
        return self.logdir / f"tierfs-{self.mnt.name}.log"

    def start(self, timeout=30):
        self.mnt.mkdir(parents=True, exist_ok=True)
        Mount.registry.append(str(self.mnt))
        if self.foreground:
            return self._start_foreground(timeout)
        rc, _, self.stderr = run_tierfs(self.argv(), self.env, timeout=timeout,
                                        sandir=self.sandir)
        if rc != 0:
            if mounted(self.mnt):
                what = self.unmount()
                raise MountError(f"tierfs exited {rc} but left {self.mnt} mounted: "
                                 f"{self.stderr}" + (f"; {what}" if what else ""))
            found = sanitizer_reports(self.sandir)
            raise MountError(f"tierfs {' '.join(self.argv())} exited {rc}: "
                             + " | ".join(self.stderr) + (f"\n{found}" if found else ""))
        self.mounted_at_exit = mounted(self.mnt)
        try:
            wait_until(lambda: mounted(self.mnt), 10, f"{self.mnt} to be mounted")
        except TimeoutError as e:
            raise MountError(f"tierfs exited 0 but {self.mnt} is not mounted: {e}")
        self.pids = daemon_pids(self.mnt)
        return self

    def _start_foreground(self, timeout):
        out = open(self.log, "ab")
        self.proc = subprocess.Popen([tierfs_bin()] + self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=out,
                                     env=tierfs_env(self.env, self.sandir))
        out.close()

        def up():
            if self.proc.poll() is not None:
                found = sanitizer_reports(self.sandir)
                raise MountError(f"tierfs -f exited {self.proc.returncode} before mounting: "
                                 + tail(self.log) + (f"\n{found}" if found else ""))
            return mounted(self.mnt)

        try:
            wait_until(up, timeout, f"{self.mnt} to be mounted")
        except TimeoutError:
            self.proc.kill()
            self.proc.wait()
            raise
        self.pids = [self.proc.pid]
        return self

    def kill(self):
        """SIGKILL the server: the kernel then fails whatever waits on the mount (ENOTCONN),
        and the dead mount stays until unmounted."""
        pids = set(self.pids) | set(daemon_pids(self.mnt))
        if self.proc is not None:
            pids.add(self.proc.pid)
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def path(self, rel=""):
        return os.path.join(self.mnt, rel)

    def unmount(self):
        """Unmount and wait for the server to exit. Return None if clean, else what went wrong
        (lazy unmount needed, server did not exit, bad exit status, a sanitizer report)."""
        if self.unmounted:
            return None
        self.unmounted = True
        problems = []
        lazy = force_unmount(self.mnt)
        if lazy:
            problems.append(lazy)
        if self.proc is not None:
            try:
                rc = self.proc.wait(timeout=15)
                if rc != 0 and not lazy:
                    problems.append(f"tierfs -f exited {rc} after unmount: {tail(self.log)}")
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                problems.append("tierfs -f still running 15s after unmount (killed)")
        else:
            pids = self.pids
            try:
                wait_until(lambda: not any(pid_alive(p) for p in pids), 15,
                           "tierfs to exit after unmount")
            except TimeoutError:
                for p in pids:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                problems.append(f"tierfs (pids {pids}) still running 15s after unmount "
                                "(killed)")
        found = sanitizer_reports(self.sandir)  # the server has exited: leaks are reported
        if found:
            problems.append(found)
        return "; ".join(problems) or None


def cleanup_mounts(under=None):
    """Safety net: unmount every recorded mount still mounted, and any FUSE mount under
    @under. Return the list of mount points it had to unmount."""
    left = [m for m in Mount.registry if mounted(m)]
    if under:
        under = os.path.realpath(under)
        left += [m for m in mountinfo() if m.startswith(under + "/") and m not in left]
    for m in left:
        force_unmount(m)
        for pid in daemon_pids(m):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return left


def expect_errno(fn, *codes):
    """Call @fn; return the OSError it raised, asserting its errno is one of @codes."""
    try:
        fn()
    except OSError as e:
        assert e.errno in codes, (
            f"expected {[errno.errorcode[c] for c in codes]}, got "
            f"{errno.errorcode.get(e.errno, e.errno)}: {e}"
        )
        return e
    raise AssertionError(f"expected {[errno.errorcode[c] for c in codes]}, but it succeeded")
