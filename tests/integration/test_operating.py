"""Running tierfs like any other service (issue 30): the metrics endpoint, systemd's notify
protocol, `tierfs status`, the alert rules and the dashboard, and the warnings at mount.

- A real Prometheus (Debian's prometheus package) scrapes a real mount that has every tier (hot,
  lagging with a limiter, disk, shared with a fleet budget), and every PromQL expression of
  mount-helpers/tierfs-grafana.json and mount-helpers/tierfs.rules.yml is evaluated through its
  HTTP API and must return data; the rules, loaded by that server, must evaluate without error.
- The endpoint: promtool's linter, 404/405, a store that hangs, 64 scrapers at once with 200
  idle connections beside them (every scrape timed; the idle ones cut by the timeout), the
  connection limit, a port already in use.
- systemd: a datagram socket stands in for $NOTIFY_SOCKET; READY=1 must come only once the
  mountpoint is the mount (its st_dev not its parent's), STOPPING=1 at unmount, WATCHDOG=1
  every half of $WATCHDOG_USEC from the I/O loop, and none while that loop is wedged
  (wedgeshim.so: curl_multi_poll sleeps while a file exists) or when $WATCHDOG_PID is another's.
- `tierfs status` once, and with -w under a pseudo-terminal (one refresh, then q or Ctrl-C).
- Warnings at mount (a non-empty mountpoint, a Redis that does not answer), and mtimes with
  their nanoseconds (file://).
"""

import errno
import http.client
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import termios
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import corpus
import harness
import lagging_util as lu
from faultproxy import FaultProxy
from test_metrics import promtool_check
from test_shared import Redis

HELPERS = harness.REPO / "mount-helpers"
RULES = HELPERS / "tierfs.rules.yml"
DASHBOARD = HELPERS / "tierfs-grafana.json"
OPTS = ["block_size=64K", "hot_size=1M", "lagging_size=1M"]
IDLE_S = 5  # endpoint.c's ENDPOINT_IDLE_S
CONN_LIMIT = 512  # endpoint.c's ENDPOINT_CONNS


# ---------------------------------------------------------------------------------------------
# helpers


def request(port, method="GET", path="/metrics", body=None, timeout=5):
    """(status, headers, body) of one request on a connection of its own."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body)
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def scrape(port, timeout=5):
    status, headers, body = request(port, timeout=timeout)
    assert status == 200, (status, body[:200])
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return body.decode()


def read_all(m, rels):
    for rel in rels:
        with open(m.path(rel), "rb") as f:
            while f.read(1 << 20):
                pass


def drop_page_cache():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")


def old_objects(corpus64k, n):
    """@n objects older than hot_ttl (read through the lagging tier), largest first."""
    objs = [r for r in corpus64k.objs if not r.startswith("recent/") and
            not r.startswith("many/") and corpus64k.objs[r] > 0]
    return sorted(objs, key=lambda r: -corpus64k.objs[r])[:n]


@pytest.fixture(autouse=True)
def recent_is_hot(request):
    """The session's corpus keeps recent/ at the time it was written: later in a full run that
    is past hot_ttl (60 s), and the tests here that read recent/ as hot would read it lagging.
    Touch it before each test that uses the corpus."""
    if "corpus64k" in request.fixturenames:
        c = request.getfixturevalue("corpus64k")
        for rel in c.objs:
            if rel.startswith("recent/"):
                os.utime(c.root / rel)
    yield


@pytest.fixture
def redis(tmp_path):
    r = Redis(tmp_path / "redis")
    try:
        yield r.start()
    finally:
        r.stop()


@pytest.fixture
def promtool():
    p = shutil.which("promtool")
    if not p:
        pytest.skip("promtool is missing: scripts/bootstrap installs Debian's prometheus package")
    return p


# ---------------------------------------------------------------------------------------------
# Prometheus


class Prometheus:
    """A Prometheus server on 127.0.0.1, scraping @targets every second as job "tierfs", with
    @rules loaded, its storage in @workdir. query() asks its HTTP API."""

    def __init__(self, workdir, targets, rules):
        self.dir = Path(workdir)
        self.targets = targets
        self.rules = rules
        self.proc = None
        self.port = None

    def start(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {self.rules}\n"
            "scrape_configs:\n  - job_name: tierfs\n    static_configs:\n"
            f"      - targets: {json.dumps(self.targets)}\n")
        self.port = harness.free_port()
        log = open(self.dir / "prometheus.log", "ab")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
             "--storage.tsdb.retention.time=1h"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        harness.wait_until(self._ready, 90, "prometheus to be ready", interval=0.2)
        return self

    def _ready(self):
        if self.proc.poll() is not None:
            raise RuntimeError("prometheus exited: " + harness.tail(self.dir / "prometheus.log"))
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=30) as r:
            doc = json.load(r)
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr):
        return self.api("query", query=expr)["result"]

    def stop(self):
        harness.stop_process(self.proc)


def dashboard_exprs():
    """(panel title, PromQL) of every target of the dashboard, its Grafana variables replaced
    as Grafana would for "every mount" over a short range."""
    doc = json.loads(DASHBOARD.read_text())
    out = []
    for p in doc["panels"]:
        for t in p.get("targets", []):
            e = (t["expr"].replace("$__rate_interval", "1m").replace("$__interval", "1m")
                 .replace("$instance", ".*"))
            assert "$" not in e, f"{p['title']}: an unreplaced variable in {e}"
            out.append((p["title"], e))
    return out


def rule_exprs():
    """(alert, PromQL) of every rule. The file is YAML; its expressions are the values of
    `expr:` keys, on one line or as a folded block (>) below it."""
    out, name, lines = [], None, RULES.read_text().splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i]
        m = re.match(r"\s*- alert:\s*(\S+)", ln)
        if m:
            name = m.group(1)
        m = re.match(r"(\s*)expr:\s*(.*)$", ln)
        if m:
            indent, rest = len(m.group(1)), m.group(2).strip()
            if rest in (">", "|", ">-", "|-"):
                block = []
                while i + 1 < len(lines) and (not lines[i + 1].strip() or
                                              len(lines[i + 1]) - len(lines[i + 1].lstrip())
                                              > indent):
                    i += 1
                    block.append(lines[i].strip())
                rest = " ".join(b for b in block if b)
            out.append((name, rest))
        i += 1
    return out


COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")


def with_bool(expr):
    """@expr with `bool` after each comparison outside label matchers and strings: the
    quantity an alert compares, as 0 or 1 for every series it has, whether it fires or not."""
    out, depth, quote, i = [], 0, None, 0
    while i < len(expr):
        c = expr[i]
        if quote:
            out.append(c)
            if c == "\\":
                out.append(expr[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'`":
            quote = c
            out.append(c)
        elif c == "{":
            depth += 1
            out.append(c)
        elif c == "}":
            depth -= 1
            out.append(c)
        elif depth == 0 and any(expr.startswith(op, i) for op in COMPARISONS):
            op = next(op for op in COMPARISONS if expr.startswith(op, i))
            out.append(op)
            i += len(op)
            if not re.match(r"\s*bool\b", expr[i:]):
                out.append(" bool")
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def test_with_bool():
    assert with_bool('a{x!="y"} > 0.5') == 'a{x!="y"} > bool 0.5'
    assert with_bool("up == 0") == "up == bool 0"
    assert with_bool("a / b >= bool 1") == "a / b >= bool 1"
    assert with_bool('a{le=~"1|2"} != 3 and b <= 4') == 'a{le=~"1|2"} != bool 3 and b <= bool 4'


def test_rules_pass_promtool(promtool):
    p = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in p.stdout


def activity(m, corpus64k):
    """Reads that give every tier something to count: hot and lagging objects from the store,
    then again from memory, the disk tier and Redis (after the page cache is dropped)."""
    hot = [r for r in corpus64k.objs if r.startswith("recent/")]
    old = old_objects(corpus64k, 6)
    read_all(m, hot + old)
    drop_page_cache()
    read_all(m, hot + old[:2])


@pytest.mark.watchdog(400)
def test_prometheus_evaluates_dashboard_and_rules(mount, corpus64k, redis, tmp_path, promtool):
    port = harness.free_port()
    cache_dir = tmp_path / "disk"
    cache_dir.mkdir(mode=0o700)
    m = mount(corpus64k.url, OPTS + [
        f"metrics={port}", f"cache_dir={cache_dir}", "disk_size=16M", "disk_lagging=on",
        f"shared={redis.url()}", "shared_fill_lagging=on", "fleet_lagging_rate=10M",
        "lagging_rate=1M", "lagging_burst=256K"])
    prom = Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"], RULES).start()
    try:
        activity(m, corpus64k)
        # enough scrapes for rate() over 1m and increase() over 1h to have two samples
        harness.wait_until(
            lambda: any(float(r["value"][1]) >= 5 for r in
                        prom.query("count_over_time(tierfs_reads_total[1m])")),
            60, "5 scrapes of the mount", interval=0.5)
        up = prom.query('up{job="tierfs"}')
        assert [r["value"][1] for r in up] == ["1"], up

        empty = []
        exprs = dashboard_exprs()
        for title, e in exprs:
            if not prom.query(e):
                empty.append(f"dashboard '{title}': {e}")
        rules = rule_exprs()
        assert len(rules) >= 10
        for name, e in rules:
            b = with_bool(e)
            assert b != e, f"{name}: no comparison in {e}"
            prom.query(e)  # valid as written (it may well return nothing: not firing)
            if not prom.query(b):
                empty.append(f"rule {name}: {b}")
        assert not empty, "expressions without data:\n" + "\n".join(empty)

        # the rules as the server loaded them: every one evaluated, none in error
        def evaluated():
            rs = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
            return len(rs) == len(rules) and all(r.get("lastEvaluation", "").startswith("2")
                                                 for r in rs) and rs
        rs = harness.wait_until(evaluated, 30, "every rule to be evaluated", interval=0.5)
        bad = [(r["name"], r.get("lastError")) for r in rs if r["health"] != "ok"]
        assert not bad, bad
        print(f"\n{len(exprs)} dashboard and {len(rules)} rule expressions returned data")
    finally:
        prom.stop()


# ---------------------------------------------------------------------------------------------
# the endpoint


def test_endpoint_serves_the_stats_and_process_metrics(mount, corpus64k, promtool):
    port = harness.free_port()
    m = mount(corpus64k.url, OPTS + [f"metrics=127.0.0.1:{port}"])
    read_all(m, old_objects(corpus64k, 3) + ["recent/tail.log"])
    text = scrape(port)
    promtool_check(promtool, text)
    st = lu.parse_stats(text)
    # the stats file's families, the same writer
    with open(m.path(".tierfs/stats")) as f:
        file_names = {ln.split()[2] for ln in f if ln.startswith("# TYPE ")}
    http_names = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}
    assert file_names and file_names <= http_names
    assert http_names - file_names == {
        "process_cpu_seconds_total", "process_open_fds", "process_max_fds",
        "process_virtual_memory_bytes", "process_resident_memory_bytes",
        "process_start_time_seconds"}
    proc = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines()
            if ln.startswith("process_")}
    pid = m.pids[0]
    rss = int(open(f"/proc/{pid}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert 0.5 * rss < proc["process_resident_memory_bytes"] < 2 * rss
    assert abs(proc["process_open_fds"] - len(os.listdir(f"/proc/{pid}/fd"))) <= 3
    assert abs(proc["process_start_time_seconds"] - os.stat(f"/proc/{pid}").st_mtime) < 60
    # the read histograms: reads from the store, by tier; the store's requests by op
    assert st.v("read_seconds_count", "store") > 0
    assert st.v("backend_request_seconds_count", "get") > 0
    assert st.v("memory_bound_bytes") == (1 << 20) * 2 + (64 << 20)
    # a hot re-read after dropping the page cache is answered by the hot tier at once
    n = st.v("read_seconds_count", "hot")
    drop_page_cache()
    read_all(m, ["recent/tail.log"])
    assert lu.parse_stats(scrape(port)).v("read_seconds_count", "hot") > n


def test_endpoint_answers_404_405_and_head(mount, corpus64k):
    port = harness.free_port()
    mount(corpus64k.url, OPTS + [f"metrics={port}"])
    for path in ("/", "/metricsx", "/metrics/", "/stats"):
        status, _, body = request(port, path=path)
        assert status == 404 and b"/metrics" in body, (path, status)
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        status, headers, _ = request(port, method=method, body=b"x" * 100)
        assert status == 405 and headers.get("Allow") == "GET, HEAD", (method, status)
    status, headers, body = request(port, method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 1000
    # keep-alive: two scrapes on one connection
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    for _ in range(2):
        c.request("GET", "/metrics")
        r = c.getresponse()
        assert r.status == 200 and r.read().startswith(b"# HELP ")
    c.close()


@pytest.mark.watchdog(240)
def test_endpoint_answers_while_the_store_hangs(mount, nginx, corpus64k):
    """The store accepts requests and never answers: a reader waits on the mount, and
    /metrics still answers each scrape within 100 ms."""
    port = harness.free_port()
    px = FaultProxy(nginx.port).start()
    try:
        m = mount(px.url, OPTS + [f"metrics={port}", "timeout=120", "retries=2"])
        first, second = old_objects(corpus64k, 2)
        read_all(m, [first])
        px.go_away("blackhole")
        done = threading.Event()
        reader = threading.Thread(target=lambda: (read_all(m, [second]), done.set()),
                                  daemon=True)
        reader.start()
        harness.wait_until(
            lambda: lu.parse_stats(scrape(port)).v("backend_active_requests") > 0, 20,
            "a request stuck at the store")
        assert not done.is_set()
        times = []
        for _ in range(20):
            t0 = time.monotonic()
            text = scrape(port, timeout=1)
            times.append(time.monotonic() - t0)
            assert "tierfs_backend_active_requests 1" in text or \
                "tierfs_backend_active_requests 2" in text
            time.sleep(0.05)
        assert not done.is_set(), "the reader should still be waiting for the store"
        print(f"\nscrapes with the store hung: max {max(times) * 1000:.1f} ms, "
              f"median {statistics.median(times) * 1000:.1f} ms")
        assert max(times) < (0.100 if not harness.sanitizer() else 0.5), times
        px.come_back()
        reader.join(60)
        assert done.is_set()
    finally:
        px.come_back()
        px.stop()


def curl_scrapes(port, scrapers, per):
    """@scrapers concurrent clients (curl --parallel), @per scrapes each, keep-alive: the
    (status, seconds) of every transfer, as curl timed it."""
    url = f"http://127.0.0.1:{port}/metrics"
    p = subprocess.run(
        ["curl", "-s", "--parallel", "--parallel-max", str(scrapers), "--parallel-immediate",
         "-w", "%{http_code} %{time_total}\\n"] + ["-o", "/dev/null", url] * (scrapers * per),
        capture_output=True, text=True, timeout=300)
    rows = [ln.split() for ln in p.stdout.splitlines() if ln.strip()]
    return [(int(c), float(t)) for c, t in rows]


def idle_connections(port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setblocking(False)
        socks.append(s)
    return socks


def closed_by_server(s):
    """Has the server closed @s (EOF or reset)?"""
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


@pytest.mark.watchdog(120)
def test_a_burst_of_connections_waits_for_a_busy_endpoint(mount, corpus64k):
    """A burst of connections, up to the endpoint's limit, that comes while its thread cannot
    accept (descheduled on a busy host; here the daemon is stopped) waits in the kernel's
    queue and is served once the thread runs, rather than losing its SYN: a dropped SYN is
    sent again only after a second, which is what made a scrape take 1028 ms in a CI run of
    test_endpoint_under_load (its plain twin). 400 connects all complete while the daemon is
    stopped; with a backlog of 128 the 130th waits for the daemon."""
    port = harness.free_port()
    m = mount(corpus64k.url, OPTS + [f"metrics={port}"])
    assert scrape(port).startswith("# HELP ")
    pid, socks = m.pids[0], []
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(400):
            s = socket.socket()
            s.setblocking(False)
            assert s.connect_ex(("127.0.0.1", port)) in (0, errno.EINPROGRESS)
            socks.append(s)
        pending = {s.fileno(): s for s in socks}
        poll = select.poll()
        for fd in pending:
            poll.register(fd, select.POLLOUT)
        deadline = time.monotonic() + 3
        while pending and time.monotonic() < deadline:
            for fd, _ in poll.poll(100):
                assert pending[fd].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                poll.unregister(fd)
                del pending[fd]
        assert len(pending) == 0, (f"{len(pending)} of 400 connections were not taken while the "
                             "endpoint's thread could not accept")
    finally:
        os.kill(pid, signal.SIGCONT)
        for s in socks:
            s.close()
    assert scrape(port).startswith("# HELP ")


@pytest.mark.watchdog(300)
def test_endpoint_under_load(mount, corpus64k):
    """64 scrapers at once, 10 scrapes each, with 200 idle connections held open beside them:
    every scrape answered, and the 99th percentile under 50 ms, or under twice what the same
    scrapes took without the idle connections just before (a baseline of the same run: this
    VM's 2 cores are shared with other jobs, and the suite's other stages run beside it); the
    idle connections are closed by the server after its timeout; past the connection limit,
    connections are not taken.

    Three rounds, each a baseline then the same scrapes with the idle connections; the bound
    is on the rounds' medians (one round in several has lost the CPU for a moment: once a p99
    of 147 ms, where the rounds around it measured 22-33 ms). Each round's figures are
    printed; no scrape of any round may take half a second."""
    port = harness.free_port()
    m = mount(corpus64k.url, OPTS + [f"metrics={port}"])
    read_all(m, old_objects(corpus64k, 3))
    idle = []
    try:
        p99s, base99s, worst = [], [], 0.0
        for rnd in range(3):
            for held in (False, True):
                if held:
                    idle = idle_connections(port, 200)
                res = curl_scrapes(port, 64, 10)
                assert len(res) == 640 and all(c == 200 for c, _ in res), res[:5]
                t = sorted(s for _, s in res)
                (p99s if held else base99s).append(t[int(len(t) * 0.99) - 1])
                worst = max(worst, t[-1])
                print(f"\nround {rnd + 1}: 64 scrapers x 10 scrapes, "
                      f"{'200' if held else 'no'} idle connections: p50 "
                      f"{t[len(t) // 2] * 1000:.1f} ms, p99 {t[int(len(t) * 0.99) - 1] * 1000:.1f}"
                      f" ms, max {t[-1] * 1000:.1f} ms")
            if rnd < 2:  # the last round's are kept for the timeout checks below
                for s in idle:
                    s.close()
                idle = []
        # a sanitizer's slowdown (TSan: p99 66-172 ms here) is not the endpoint's cost: the
        # figures are printed, the bounds are for a plain build
        if not harness.sanitizer():
            bound = max(0.050, 2 * sorted(base99s)[1])
            assert sorted(p99s)[1] < bound, (
                f"p99 with 200 idle connections {[f'{p * 1000:.1f} ms' for p in p99s]}, "
                f"without {[f'{p * 1000:.1f} ms' for p in base99s]}: over {bound * 1000:.1f} ms")
            assert worst < 0.5, f"a scrape took {worst * 1000:.0f} ms"
        # the idle ones held through the load: closed by the server in the end
        harness.wait_until(lambda: all(closed_by_server(s) for s in idle), IDLE_S + 10,
                           "the server to close the idle connections")
        # not before the timeout: the rounds above can take longer than it on a busy machine,
        # so a fresh few are watched from the moment they open, and the first close is timed
        idle += idle_connections(port, 8)
        fresh, opened = idle[-8:], time.monotonic()
        harness.wait_until(lambda: any(closed_by_server(s) for s in fresh), IDLE_S + 10,
                           "the server to close a fresh idle connection")
        cut = time.monotonic() - opened
        assert cut >= IDLE_S - 1, f"an idle connection was closed after {cut:.1f} s"
        harness.wait_until(lambda: all(closed_by_server(s) for s in fresh), IDLE_S + 10,
                           "the server to close the fresh idle connections")
    finally:
        for s in idle:
            s.close()
    # the connection limit: past it, connections wait unaccepted (in the listen queue), so the
    # process holds at most the limit; a scrape then waits until the timeout frees places
    pid = m.pids[0]
    base = sockets_of(pid)  # the listening socket and whatever else the mount holds
    over = idle_connections(port, CONN_LIMIT + 20)
    try:
        harness.wait_until(lambda: sockets_of(pid) - base >= CONN_LIMIT, 10, "the limit")
        time.sleep(0.5)
        held = sockets_of(pid) - base
        assert held == CONN_LIMIT, held
        t0 = time.monotonic()
        assert scrape(port, timeout=IDLE_S + 10).startswith("# HELP ")
        waited = time.monotonic() - t0
        print(f"a scrape with {CONN_LIMIT + 20} idle connections open: answered after "
              f"{waited:.1f} s")
        assert waited < IDLE_S + 5
    finally:
        for s in over:
            s.close()
    assert scrape(port).startswith("# HELP ")


def sockets_of(pid):
    """Sockets process @pid holds open."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def test_port_in_use_fails_the_mount(fuse, corpus64k, tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    harness.Mount.registry.append(str(mnt))
    try:
        rc, _, err = harness.run_tierfs([corpus64k.url, str(mnt), "-o", f"metrics={port}"])
    finally:
        busy.close()
    assert rc == 1, (rc, err)
    assert len(err) == 1, err
    assert f"metrics={port}" in err[0] and "Address already in use" in err[0], err
    assert not harness.mounted(mnt)
    assert str(mnt) not in open("/proc/mounts").read()


# ---------------------------------------------------------------------------------------------
# systemd's notify protocol


class NotifySocket:
    """A stand-in for systemd's $NOTIFY_SOCKET: a datagram socket whose messages a thread
    records with the time they came, then runs @on_ready when one was READY=1 (its answer in
    .ready_check)."""

    def __init__(self, path, on_ready=None):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.msgs = []  # (monotonic time, message)
        self.on_ready = on_ready
        self.ready_check = None
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        self.sock.settimeout(0.05)
        while not self.stop:
            try:
                data = self.sock.recv(4096).decode()
            except socket.timeout:
                continue
            self.msgs.append((time.monotonic(), data))
            if "READY=1" in data.split("\n") and self.on_ready:
                self.ready_check = self.on_ready()

    def lines(self, since=0.0):
        return [ln for t, d in self.msgs if t >= since for ln in d.split("\n")]

    def close(self):
        self.stop = True
        self.t.join(5)
        self.sock.close()


def wedge_env(tmp_path, **ctl):
    """LD_PRELOAD of wedgeshim.so, with its control files (wedge=: the I/O loop, hold=: the
    session loop's start)."""
    shim = Path(harness.tierfs_bin()).parent / "tests" / "wedgeshim.so"
    assert shim.is_file(), f"{shim}: build it (meson builds it with the tests)"
    asan = harness.sanitizer_env(tmp_path / "san-wedge")["ASAN_OPTIONS"]
    env = {"LD_PRELOAD": str(shim), "ASAN_OPTIONS": asan + ":verify_asan_link_order=0"}
    if "wedge" in ctl:
        env["TIERFS_WEDGE_CTL"] = str(ctl["wedge"])
    if "hold" in ctl:
        env["TIERFS_HOLD_CTL"] = str(ctl["hold"])
    return env


@pytest.mark.watchdog(120)
def test_notify_ready_watchdog_stopping(mount, corpus64k, tmp_path):
    """READY=1 only once the mount answers: the session loop is held back for a second after
    the mount exists (the shim), and READY must not come until it runs; at READY the
    mountpoint is the mount. Then the watchdog's pings, none while the I/O loop is wedged, and
    STOPPING=1 at the unmount."""
    mnt = tmp_path / "mnt-notify"
    ctl, hold = tmp_path / "wedge", tmp_path / "hold"
    port = harness.free_port()

    def served():
        # at the moment READY=1 arrives: is the mountpoint the mount, and does it answer?
        st, parent = os.stat(mnt), os.stat(mnt.parent)
        return st.st_dev != parent.st_dev and os.path.isdir(mnt / ".tierfs")

    ns = NotifySocket(tmp_path / "notify", on_ready=served)
    seen = {}

    def release():
        # once the mount exists (mountinfo: it does not touch the mount), hold its loop 1 s
        harness.wait_until(lambda: str(mnt) in harness.mountinfo(), 30, "the mount")
        time.sleep(1.0)
        seen["ready while held"] = "READY=1" in ns.lines()
        seen["released"] = time.monotonic()
        hold.unlink()

    hold.write_text("")
    releaser = threading.Thread(target=release, daemon=True)
    releaser.start()
    try:
        env = dict(wedge_env(tmp_path, wedge=ctl, hold=hold), NOTIFY_SOCKET=ns.path,
                   WATCHDOG_USEC="1000000")
        m = mount(corpus64k.url, OPTS + [f"metrics={port}"], env=env, foreground=True,
                  name="mnt-notify")
        releaser.join(30)
        harness.wait_until(lambda: "READY=1" in ns.lines(), 10, "READY=1")
        assert seen["ready while held"] is False, "READY=1 while the session loop was held"
        t_ready = next(t for t, d in ns.msgs if "READY=1" in d.split("\n"))
        assert t_ready >= seen["released"]
        harness.wait_until(lambda: ns.ready_check is not None, 10, "the check at READY=1")
        assert ns.ready_check is True, "READY=1 came before the mount answered"
        status = [ln for ln in ns.lines() if ln.startswith("STATUS=")]
        assert status and corpus64k.url in status[0] and str(mnt) in status[0], status
        assert f"metrics 127.0.0.1:{port}" in status[0], status
        assert ns.lines().count("READY=1") == 1

        # pings every half of WATCHDOG_USEC
        t0 = time.monotonic()
        time.sleep(2.2)
        pings = ns.lines(since=t0).count("WATCHDOG=1")
        assert 3 <= pings <= 6, pings

        # the I/O loop wedged: the pings stop; the endpoint (its own thread) still answers
        ctl.write_text("")
        time.sleep(1.0)  # a ping already on its way may still land
        t1 = time.monotonic()
        time.sleep(2.0)
        assert ns.lines(since=t1).count("WATCHDOG=1") == 0, "pings from a wedged loop"
        assert scrape(port, timeout=2).startswith("# HELP ")
        ctl.unlink()
        t2 = time.monotonic()
        harness.wait_until(lambda: "WATCHDOG=1" in ns.lines(since=t2), 3,
                           "pings once the loop turns again")

        assert "STOPPING=1" not in ns.lines()
        assert m.unmount() is None
        harness.wait_until(lambda: "STOPPING=1" in ns.lines(), 5, "STOPPING=1")
        assert ns.lines().count("STOPPING=1") == 1
    finally:
        for f in (ctl, hold):
            if f.exists():
                f.unlink()
        ns.close()


def test_notify_watchdog_of_another_pid(mount, corpus64k, tmp_path):
    """$WATCHDOG_PID names another process (a daemonized child is not systemd's main PID):
    READY=1, but no pings. Without $NOTIFY_SOCKET nothing is sent at all (every other test)."""
    ns = NotifySocket(tmp_path / "notify")
    try:
        env = {"NOTIFY_SOCKET": ns.path, "WATCHDOG_USEC": "400000", "WATCHDOG_PID": "1"}
        mount(corpus64k.url, OPTS, env=env, foreground=True)
        harness.wait_until(lambda: "READY=1" in ns.lines(), 10, "READY=1")
        time.sleep(1.5)
        assert "WATCHDOG=1" not in ns.lines()
    finally:
        ns.close()


# ---------------------------------------------------------------------------------------------
# tierfs status


def test_status_once(mount, corpus64k, tmp_path):
    cache_dir = tmp_path / "disk"
    cache_dir.mkdir(mode=0o700)
    m = mount(corpus64k.url, OPTS + [f"cache_dir={cache_dir}", "disk_size=16M",
                                     "lagging_rate=10M"])
    old = old_objects(corpus64k, 4)
    read_all(m, old)
    reads0 = lu.stats(m.mnt).v("reads_total")
    # reads while it samples: the rates must see them
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            drop_page_cache()
            read_all(m, ["recent/tail.log"])

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        p = subprocess.run([harness.tierfs_bin(), "status", "-n", "1", str(m.mnt)],
                           capture_output=True, text=True, timeout=30)
    finally:
        stop.set()
        t.join(30)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    print("\n" + out)
    lines = out.splitlines()
    assert lines[0].startswith(f"tierfs status {m.mnt}") and "rates over 1." in lines[0]
    assert max(len(ln) for ln in lines[1:]) <= 80  # the title holds the path
    rows = {ln.split()[0]: ln.split() for ln in lines[2:] if ln.strip()}
    assert {"hot", "lagging", "disk", "reads", "limiter", "store", "memory"} <= set(rows)
    assert "fleet" not in rows  # no shared= on this mount
    # reads per second while the reader ran, and the total since the mount
    m_reads = re.search(r"^reads\s+([\d.]+)/s .*\((\d+) reads, (\d+) errors since mount\)",
                        out, re.M)
    assert m_reads, out
    assert float(m_reads.group(1)) > 0
    assert int(m_reads.group(2)) > reads0 and int(m_reads.group(3)) == 0
    # the hot tier served the re-reads: a hit ratio over the interval
    assert re.search(r"^hot\s+\d+\.\d%", out, re.M), out
    assert rows["limiter"][1:3] == ["rate", "10.0MB/s"], rows["limiter"]


def test_status_errors(tmp_path):
    p = subprocess.run([harness.tierfs_bin(), "status", str(tmp_path)], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 1 and "is a tierfs mounted there?" in p.stderr, p.stderr
    p = subprocess.run([harness.tierfs_bin(), "status"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and p.stderr.startswith("usage: tierfs status"), p.stderr
    p = subprocess.run([harness.tierfs_bin(), "status", "-n", "0", str(tmp_path)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2


def run_watch(mnt, keys):
    """`tierfs status -w -n 0.3 MNT` on a pseudo-terminal: read until it has drawn two
    screens, send @keys (or SIGINT for None). @return (exit status, output, the terminal's
    local flags after it exited)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([harness.tierfs_bin(), "status", "-w", "-n", "0.3", str(mnt)],
                         stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    out = b""
    deadline = time.monotonic() + 20
    try:
        while out.count(b"\033[H\033[2J") < 2 and time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.5)
            if r:
                out += os.read(master, 65536)
        assert out.count(b"\033[H\033[2J") >= 2, out[-2000:]
        if keys is None:
            os.kill(p.pid, signal.SIGINT)
        else:
            os.write(master, keys)
        rc = p.wait(5)
        while select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        lflag = termios.tcgetattr(slave)[3]
        return rc, out.decode(errors="replace"), lflag
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
        os.close(slave)


def test_status_watch_on_a_terminal(mount, corpus64k):
    m = mount(corpus64k.url, OPTS)
    read_all(m, old_objects(corpus64k, 2))
    for keys in (b"q", None):
        rc, out, lflag = run_watch(m.mnt, keys)
        assert rc == 0, (keys, out[-2000:])
        screens = out.split("\033[H\033[2J")[1:]
        assert len(screens) >= 2
        for s in screens[:2]:
            assert f"tierfs status {m.mnt}" in s and "\nhot " in s.replace("\r", ""), s
        assert "(q to quit)" in out
        # the terminal is back in canonical mode with echo
        assert lflag & termios.ICANON and lflag & termios.ECHO, (keys, lflag)


# ---------------------------------------------------------------------------------------------
# small things


def test_warnings_at_mount(mount, corpus64k, tmp_path):
    mnt = tmp_path / "busy"
    mnt.mkdir()
    (mnt / "left-behind.txt").write_text("x")
    dead = harness.free_port()  # nothing listens there
    m = mount(corpus64k.url, OPTS + [f"shared=redis://127.0.0.1:{dead}"], name="busy")
    err = "\n".join(m.stderr)
    assert re.search(rf"warning: mountpoint {mnt} is not empty \(1 entry\)", err), err
    assert re.search(rf"warning: shared tier: Redis at 127.0.0.1:{dead} does not answer "
                     r"\(Connection refused\)", err), err
    # one line each (other lines, about other settings, may come too)
    assert len([ln for ln in m.stderr if "warning: mountpoint" in ln]) == 1, m.stderr
    assert len([ln for ln in m.stderr if "does not answer" in ln]) == 1, m.stderr
    assert not os.path.exists(m.path("left-behind.txt"))  # hidden, as the warning says
    assert os.path.exists(m.path("recent/tail.log"))


def test_no_warnings_on_an_empty_mountpoint(mount, corpus64k, redis):
    m = mount(corpus64k.url, OPTS + [f"shared={redis.url()}"])
    assert not [ln for ln in m.stderr if "warning: mountpoint" in ln or "does not answer" in ln
                or "not empty" in ln], m.stderr


def test_mtime_keeps_nanoseconds(mount, corpus64k):
    m = mount(corpus64k.url, OPTS)
    rels = ["block.bin", "recent/tail.log"]
    for rel in rels:
        src = os.stat(os.path.join(corpus64k.root, rel))
        assert os.stat(m.path(rel)).st_mtime_ns == src.st_mtime_ns, rel
    # the corpus's old objects have a fraction of a second: shown, not dropped
    assert os.stat(m.path("block.bin")).st_mtime_ns % 10**9 == corpus.OLD_MTIME_NS % 10**9 != 0
    read_all(m, rels)  # opened: the version's own metadata, not the listing's
    for rel in rels:
        src = os.stat(os.path.join(corpus64k.root, rel))
        assert os.stat(m.path(rel)).st_mtime_ns == src.st_mtime_ns, rel


# ---------------------------------------------------------------------------------------------
# the systemd unit


def _unit_text():
    unit = Path(harness.tierfs_bin()).parent / "mount-helpers" / "tierfs@.service"
    assert unit.is_file(), f"{unit}: meson generates it"
    return unit.read_text()


def test_unit_file():
    text = _unit_text()
    for want in ("Type=notify", "NotifyAccess=main", "WatchdogSec=", "Restart=on-failure",
                 "CacheDirectory=tierfs/%i", "CacheDirectoryMode=0700", " -f -o "):
        assert want in text, want


def test_unit_file_verifies(tmp_path):
    """systemd-analyze verify finds nothing to say of the unit (a skip where it is missing)."""
    text = _unit_text()
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze is not installed: the unit cannot be verified here")
    # verify a copy whose ExecStart is this build and whose environment is inline
    copy = tmp_path / "tierfs@mnt-x.service"
    copy.write_text(re.sub(r"(?m)^ExecStart=\S+", f"ExecStart={harness.tierfs_bin()}",
                           text.replace("EnvironmentFile=/etc/tierfs/%i.env",
                                        "Environment=TIERFS_URL=file:///srv TIERFS_OPTS=ro")))
    p = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True,
                       timeout=60)
    said = [ln for ln in (p.stdout + p.stderr).splitlines()
            if ln.strip() and "man tierfs(8)" not in ln and "fusermount3" not in ln]
    assert not said, said
