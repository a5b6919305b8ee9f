"""Fixtures of the tierfs integration suite: corpora, nginx, s3rver, Ceph RGW and tierfs mounts.

Servers listen on 127.0.0.1 only, on ports picked at run time. Mount points live in each test's
tmp_path; every mount a test makes is unmounted in its teardown, and the test fails if that
took a lazy unmount. A session-end (and atexit) safety net unmounts whatever is left.
"""

import atexit
import os
import shutil
import signal
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

import corpus
import harness
import rgw as rgwlib

from harness import B4M, B64K, BUCKET

_servers = []  # every server process started, for the atexit net
_rgws = []  # every Ceph cluster started (rgw.Rgw), for the atexit net
_basetemp = []


def _atexit_cleanup():
    for s in _servers:
        harness.stop_process(s.proc)
    for r in _rgws:
        r.stop()
    harness.cleanup_mounts(_basetemp[0] if _basetemp else None)


atexit.register(_atexit_cleanup)


def _sigterm(signum, frame):
    # Turn SIGTERM (a CI time-out, a Ctrl-C'd parent) into the interrupt pytest cleans up after.
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    signal.signal(signal.SIGTERM, _sigterm)
    config.addinivalue_line("markers", "watchdog(seconds): time limit of a test that mounts")
    config.addinivalue_line("markers", "concurrency: drives tierfs from many threads or "
                                       "processes at once (scripts/test runs these under TSan)")


def pytest_sessionfinish(session, exitstatus):
    under = _basetemp[0] if _basetemp else None
    left = harness.cleanup_mounts(under)
    for s in _servers:
        harness.stop_process(s.proc)
    for r in _rgws:
        r.stop()
        if r.leftover():
            print(f"\nSAFETY NET: Ceph daemons {r.leftover()} still run after stop()")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if left:
        print(f"\nSAFETY NET: had to unmount {left}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    # Sanitizer reports that no test failed on (from a server nobody unmounted, say).
    if under:
        for d in sorted(Path(under).glob("*/san-*")):  # tmp_path/san-MNT, san-run/san-*
            found = harness.sanitizer_reports(d)
            if found:
                print(f"\nSAFETY NET: a sanitizer report no test failed on:\n{found}")
                session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ---------------------------------------------------------------------------------------------
# the program and the kernel


@pytest.fixture(scope="session")
def tierfs_bin():
    b = harness.tierfs_bin()
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        pytest.fail(f"tierfs binary not found at {b} (build it, or set TIERFS_BIN)")
    return b


@pytest.fixture(scope="session")
def fuse(tierfs_bin):
    """Tests that mount use this: they skip, saying why, only if /dev/fuse cannot be opened."""
    why = harness.fuse_usable()
    if why:
        pytest.skip(why)
    return True


@pytest.fixture(scope="session", autouse=True)
def _record_basetemp(tmp_path_factory):
    _basetemp[:] = [str(tmp_path_factory.getbasetemp())]
    harness.SAN_ROOT = os.path.join(_basetemp[0], "san-run")


# ---------------------------------------------------------------------------------------------
# corpora


def _corpus(tmp_path_factory, name, block_size):
    root = tmp_path_factory.mktemp(name)
    objs = corpus.build(root, block_size)
    return SimpleNamespace(root=root, objs=objs, block_size=block_size,
                           url="file://" + str(root))


@pytest.fixture(scope="session")
def corpus64k(tmp_path_factory):
    return _corpus(tmp_path_factory, "corpus-64k", B64K)


@pytest.fixture(scope="session")
def corpus4m(tmp_path_factory):
    return _corpus(tmp_path_factory, "corpus-4m", B4M)


# ---------------------------------------------------------------------------------------------
# servers


@pytest.fixture(scope="session")
def tls(tmp_path_factory):
    """(cert, key) of a self-signed certificate for 127.0.0.1 and localhost."""
    return harness.make_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def nginx(tmp_path_factory, corpus64k, tls):
    """nginx serving the 64K corpus over HTTP (.url) and HTTPS (.https_url)."""
    srv = harness.Nginx(corpus64k.root, tmp_path_factory.mktemp("nginx"), tls)
    _servers.append(srv)
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def nginx_factory(tmp_path):
    """Start a private nginx on a given root (for tests that kill or freeze their server)."""
    started = []

    def start(root, tls=None):
        srv = harness.Nginx(root, tmp_path / f"nginx{len(started)}", tls)
        _servers.append(srv)
        started.append(srv)
        return srv.start()

    try:
        yield start
    finally:
        for s in started:
            s.stop()


@pytest.fixture(scope="session")
def bucket_view(tmp_path_factory, corpus64k):
    """A local copy of exactly what the S3 stores' bucket BUCKET holds: the 64K corpus but for
    corpus.S3_EXCLUDE (keys = relative paths)."""
    view = tmp_path_factory.mktemp("bucket-view") / "v"
    shutil.copytree(corpus64k.root, view,
                    ignore=lambda d, names: [n for n in names if os.path.samefile(
                        d, corpus64k.root) and n in corpus.S3_EXCLUDE])
    return view


@pytest.fixture(scope="session")
def s3rver_s3(tmp_path_factory, bucket_view):
    """s3rver with bucket BUCKET holding bucket_view. .view is that copy, .keys what the bucket
    lists ({key: (size, LastModified)}), .env the credentials a mount needs."""
    srv = harness.S3rver(tmp_path_factory.mktemp("s3rver"))
    srv.view = bucket_view
    _servers.append(srv)
    try:
        srv.start()
        srv.keys = srv.upload_tree(BUCKET, bucket_view)
        yield srv
    finally:
        srv.stop()


def _rgw_required():
    """CI=true, or TIERFS_REQUIRE_RGW=1 (scripts/test sets it, its bootstrap having installed
    the packages): an RGW that is missing fails its tests instead of skipping them."""
    return any(os.environ.get(v, "").lower() not in ("", "0", "false", "no")
               for v in ("CI", "TIERFS_REQUIRE_RGW"))


@pytest.fixture(scope="session")
def rgw(tmp_path_factory, bucket_view):
    """Ceph RGW (tests/integration/rgw.py: one ceph-mon, one ceph-osd, radosgw), started once a
    session (15-20 s), with bucket BUCKET holding bucket_view: the same shape as the s3
    fixture (.endpoint, .client(), .env, .view, .keys, .kind). Its files, the OSD's sparse
    block file too, live under the session's tmp dir and go when it stops, also on failure.
    Without the Ceph packages a developer's run skips, saying so; in CI (CI=true, or
    TIERFS_REQUIRE_RGW=1 as scripts/test sets) it fails them. An RGW that does not start
    fails them always."""
    why = rgwlib.missing()
    if why:
        if _rgw_required():
            pytest.fail(f"CI=true or TIERFS_REQUIRE_RGW=1: {why}", pytrace=False)
        pytest.skip(why)
    srv = rgwlib.Rgw(tmp_path_factory.mktemp("rgw"))
    _rgws.append(srv)
    try:
        try:
            srv.start()
        except RuntimeError as e:
            pytest.fail(f"Ceph RGW did not start: {e}", pytrace=False)
        srv.kind = "rgw"
        srv.env = {"AWS_ACCESS_KEY_ID": srv.access_key, "AWS_SECRET_ACCESS_KEY": srv.secret_key}
        srv.view = bucket_view
        srv.keys = harness.upload_tree(srv.client(), BUCKET, bucket_view)
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def s3(s3rver_s3):
    """s3rver (s3rver_s3): the S3 store of the tests that are about s3rver, or that need one
    store only."""
    return s3rver_s3


S3_STORES = ["s3rver", "rgw"]


@pytest.fixture(params=S3_STORES)
def s3store(request):
    """Each S3 store in turn (a test using it runs once per store, [s3rver] and [rgw]): s3rver
    or Ceph RGW, both with bucket BUCKET holding bucket_view and the same attributes. A test
    file whose `s3` tests should all run on both overrides `s3` with this fixture."""
    return request.getfixturevalue("s3rver_s3" if request.param == "s3rver" else "rgw")


# ---------------------------------------------------------------------------------------------
# mounts


# A test that uses `mount` and is still running this many seconds after its setup is taken
# as hung (a read blocked in the kernel on a server that never answers): a watchdog kills its
# tierfs servers, which makes every blocked call on those mounts fail, and the test fails.
# @pytest.mark.watchdog(SECONDS) changes the limit for one test; TIERFS_TEST_WATCHDOG for all.
WATCHDOG_S = float(os.environ.get("TIERFS_TEST_WATCHDOG", "180"))


@pytest.fixture
def mount(fuse, tmp_path, request):
    """mount(url, options=[...], env={...}, foreground=False) -> harness.Mount, mounted.

    Teardown unmounts each mount and fails the test if that needed a lazy unmount, the server
    did not exit, or the watchdog had to end the test."""
    mounts = []
    marker = request.node.get_closest_marker("watchdog")
    limit = float(marker.args[0]) if marker else WATCHDOG_S
    fired = threading.Event()

    def bite():
        fired.set()
        for m in list(mounts):
            m.kill()

    timer = threading.Timer(limit, bite)
    timer.daemon = True
    timer.start()

    def do(url, options=(), env=None, foreground=False, name=None):
        mnt = tmp_path / (name or f"mnt{len(mounts)}")
        m = harness.Mount(url, mnt, options, env=env, foreground=foreground, logdir=tmp_path)
        mounts.append(m)
        return m.start()

    try:
        yield do
    finally:
        timer.cancel()
    problems = [p for p in (m.unmount() for m in mounts) if p]
    if fired.is_set():
        problems.insert(0, f"the test was still running after {limit:g} s: the watchdog "
                           "killed its tierfs servers so that blocked calls return")
    if problems:
        pytest.fail("unmount: " + " / ".join(problems))


@pytest.fixture
def mountpoint(tmp_path):
    """An empty directory to mount on; anything left mounted there is unmounted at teardown
    (and fails the test)."""
    mnt = tmp_path / "mnt-bare"
    mnt.mkdir()
    harness.Mount.registry.append(str(mnt))
    yield mnt
    if harness.mounted(mnt):
        what = harness.force_unmount(mnt)
        pytest.fail(f"{mnt} was left mounted" + (f"; {what}" if what else ""))
