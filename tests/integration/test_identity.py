"""Object identity and freshness on real mounts (file://, nginx, s3rver).

- A cached block is named by (object, version, block), not by an inode: after
  `echo 2 > /proc/sys/vm/drop_caches` (the kernel forgets the inodes) a re-read fetches nothing,
  according to the stats file and, for nginx, to its access log.
- Versions never mix through the shared page cache (the issue's scenario, metadata_ttl=1).
- A changed object does not fail a fresh open: the new open reads the new bytes.
- A new object is visible to a lookup by name within negative_ttl (+ margin).
- A new object is visible to readdir within metadata_ttl (+ margin).
- 100 missing names polled in one directory cost one HEAD each per negative_ttl.

Each test makes its own store (a directory, a private nginx, or a fresh bucket), because it
changes objects in it. drop_caches is machine-wide; other tests running at the same time only
lose their page cache, which they must cope with anyway.
"""

import errno
import os
import time
import uuid

import pytest

import harness
from lagging_util import stats

MIB = 1 << 20
NEG_TTL = 1  # negative_ttl's default
# a loaded 2-core machine (six sessions) may take this long over a bound on top of it
LOAD_MARGIN = 1.0
BACKENDS = ["file", "http", "s3"]


def pattern(tag, size):
    """@size bytes that differ per block and per @tag."""
    out = bytearray()
    i = 0
    while len(out) < size:
        out += f"{tag}:{i:012d}|".encode()
        i += 1
    return bytes(out[:size])


class Store:
    """A writable store behind one of the three backends: put(rel, data), url, options."""

    def __init__(self, kind, tmp_path, nginx_factory, s3):
        self.kind = kind
        self.root = tmp_path / "store"
        self.root.mkdir()
        self.nginx = None
        self.options = []
        if kind == "file":
            self.url = "file://" + str(self.root)
        elif kind == "http":
            self.nginx = nginx_factory(self.root)
            self.url = self.nginx.url
        else:
            self.s3 = s3.client()
            self.bucket = "ident-" + uuid.uuid4().hex[:12]
            self.s3.create_bucket(Bucket=self.bucket)
            self.url = f"s3://{self.bucket}"
            self.options = harness.s3_options(s3)
        self.env = harness.S3_ENV if kind == "s3" else None

    def put(self, rel, data):
        """Create or replace @rel atomically (write aside, then rename / one PUT)."""
        if self.kind == "s3":
            self.s3.put_object(Bucket=self.bucket, Key=rel, Body=data)
            return
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp-" + uuid.uuid4().hex[:6])
        tmp.write_bytes(data)
        os.replace(tmp, p)

    def append(self, rel, data):
        if self.kind == "s3":
            old = self.s3.get_object(Bucket=self.bucket, Key=rel)["Body"].read()
            self.put(rel, old + data)
            return
        with open(self.root / rel, "ab") as f:
            f.write(data)


@pytest.fixture
def store(request, tmp_path, nginx_factory, s3):
    return Store(request.param, tmp_path, nginx_factory, s3)


def drop_dentries_and_inodes():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def read_all(path):
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------------------------------------
# 1. forgetting an inode loses nothing


@pytest.mark.parametrize("store", BACKENDS, indirect=True)
def test_drop_caches_refetches_nothing(mount, store):
    size = 16 * MIB  # 16 blocks of 1 MiB, as in the issue (64 MiB there)
    data = pattern("hot", size)
    store.put("seg/hot.bin", data)
    m = mount(store.url, store.options + ["block_size=1M", "hot_size=64M"], env=store.env)
    path = m.path("seg/hot.bin")

    assert read_all(path) == data
    before = stats(m.mnt)
    assert before.v("cache_fetches_total", "hot") >= 16
    ino = os.stat(path).st_ino
    mark = store.nginx.log_mark() if store.nginx else None

    # The kernel forgets the inode (and with it the file's pages): tierfs sees a new lookup
    # and gives it a new inode number. Other sessions may pin dentries for a moment: retry.
    def forgotten():
        drop_dentries_and_inodes()
        return os.stat(path).st_ino != ino

    harness.wait_until(forgotten, 20, "the kernel to forget the inode", interval=0.2)

    assert read_all(path) == data
    after = stats(m.mnt)
    fetched = after.d(before, "cache_fetched_bytes_total", "hot")
    assert after.d(before, "cache_fetches_total", "hot") == 0 and fetched == 0, (
        f"the re-read after drop_caches fetched {fetched:.0f} bytes "
        f"({after.d(before, 'cache_fetches_total', 'hot'):.0f} fetches)")
    assert after.d(before, "cache_hits_total", "hot") >= 16, "the re-read did not reach tierfs"
    assert after.v("cache_resident_blocks", "hot") == before.v("cache_resident_blocks", "hot")
    if store.nginx:
        store.nginx.wait_idle()
        gets = store.nginx.gets("seg/hot.bin", since=mark)
        assert not gets, f"nginx served {len(gets)} GETs of the object on the re-read: {gets[:3]}"


# ---------------------------------------------------------------------------------------------
# 2. versions never mix through the page cache


@pytest.mark.parametrize("store", BACKENDS, indirect=True)
def test_versions_never_mix_in_page_cache(mount, store):
    """The issue's scenario: handle A reads 'A's, the object is replaced by 'B's, handle B opens
    after metadata_ttl, A preads, B reads everything. B never sees an 'A'; A never gets a 'B'
    (it may get ESTALE)."""
    s = store
    size = MIB
    s.put("obj", b"A" * size)
    m = mount(s.url, s.options + ["block_size=64K", "metadata_ttl=1"], env=s.env)
    path = m.path("obj")

    fa = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fa, 256 * 1024, 0) == b"A" * (256 * 1024)
        if s.kind == "http":
            # nginx's ETag is the mtime in seconds and the size: a replacement of the same
            # size within the same second is the same version to any HTTP client
            # (docs/semantics.md, "Versions and freshness")
            a_sec = int(os.stat(s.root / "obj").st_mtime)
            harness.wait_until(lambda: int(time.time()) > a_sec, 3, "the next second",
                               interval=0.01)
        s.put("obj", b"B" * size)
        # the scenario's own timing: metadata_ttl (1 s) must have passed
        t_end = time.monotonic() + 1.2
        while time.monotonic() < t_end:
            time.sleep(t_end - time.monotonic())
        fb = os.open(path, os.O_RDONLY)
        try:
            a_reads = []

            def a_pread(n, off):
                try:
                    a_reads.append((off, os.pread(fa, n, off)))
                except OSError as e:
                    assert e.errno == errno.ESTALE, f"A's pread at {off}: {e}"
                    a_reads.append((off, None))

            a_pread(64 * 1024, 0)
            got_b = b""
            while True:
                chunk = os.read(fb, 128 * 1024)
                if not chunk:
                    break
                got_b += chunk
            a_pread(64 * 1024, 128 * 1024)
            a_pread(64 * 1024, 512 * 1024)
        finally:
            os.close(fb)
    finally:
        os.close(fa)
    assert len(got_b) == size, f"B read {len(got_b)} bytes, want {size}"
    bad = got_b.count(b"A")
    assert bad == 0, f"B (opened on the new version) read {bad} 'A' bytes, first at " \
                     f"{got_b.find(b'A')}"
    for off, d in a_reads:
        assert d is None or b"B" not in d, f"A (old version) read 'B' bytes at {off}"
        assert d is None or d == b"A" * len(d)


# ---------------------------------------------------------------------------------------------
# 3. a changed object does not fail a fresh open


@pytest.mark.parametrize("store", BACKENDS, indirect=True)
def test_appended_object_fresh_open_reads_new_bytes(mount, store):
    old = pattern("old", 100 * 1024 + 7)
    more = pattern("more", 50 * 1024)
    store.put("log/seg.log", old)
    m = mount(store.url, store.options + ["block_size=64K"], env=store.env)
    path = m.path("log/seg.log")
    assert os.stat(path).st_size == len(old)  # listed and looked up; nothing read yet

    store.append("log/seg.log", more)
    try:
        got = read_all(path)  # a new open that has served no byte: moves to the new version
    except OSError as e:
        pytest.fail(f"a fresh open of the appended object failed: {e}")
    assert got == old + more, f"read {len(got)} bytes, want {len(old + more)} (old + appended)"
    assert os.stat(path).st_size == len(old) + len(more)


# ---------------------------------------------------------------------------------------------
# 4. a new object is visible by name within negative_ttl


@pytest.mark.parametrize("store", BACKENDS, indirect=True)
def test_new_object_visible_by_name(mount, store):
    store.put("seg-001.log", b"first")
    m = mount(store.url, store.options + ["block_size=64K"], env=store.env)
    assert os.listdir(m.mnt) == ["seg-001.log"] or "seg-001.log" in os.listdir(m.mnt)
    new = m.path("seg-002.log")
    harness.expect_errno(lambda: os.stat(new), errno.ENOENT)  # now cached as missing

    data = pattern("new", 70 * 1024)
    store.put("seg-002.log", data)
    t0 = time.monotonic()

    def visible():
        try:
            return os.stat(new).st_size == len(data)
        except FileNotFoundError:
            return False

    bound = NEG_TTL + 0.5
    try:
        harness.wait_until(visible, bound + LOAD_MARGIN, "the new object to be visible",
                           interval=0.05)
    except TimeoutError:
        pytest.fail(f"a new object was still ENOENT {bound + LOAD_MARGIN:.1f} s after upload "
                    f"(negative_ttl={NEG_TTL})")
    took = time.monotonic() - t0
    assert read_all(new) == data
    print(f"new object visible by name after {took:.3f} s (bound {bound} s)")


@pytest.mark.parametrize("store", ["file"], indirect=True)
def test_missing_name_not_believed_twice(mount, store):
    """The store's "missing" is believed negative_ttl from when the store said it, not longer:
    when the kernel forgets its negative entry early (memory pressure; drop_caches here), the
    next lookup must not be given a fresh negative_ttl of kernel caching on top of what the
    namespace already believes. negative_ttl=3: the name is missing at T0, its object is
    created at once, the kernel's entries are dropped at T0+1.5 and the name looked up again
    (still missing: the namespace believes it until T0+3). It must be visible by T0+3.75;
    a kernel entry of 3 s given at T0+1.5 hid it until T0+4.5."""
    store.put("seg-001.log", b"first")
    m = mount(store.url, store.options + ["block_size=64K", "negative_ttl=3"], env=store.env)
    assert "seg-001.log" in os.listdir(m.mnt)
    new = m.path("seg-002.log")
    t0 = time.monotonic()
    harness.expect_errno(lambda: os.stat(new), errno.ENOENT)
    store.put("seg-002.log", b"second")
    harness.wait_until(lambda: time.monotonic() - t0 >= 1.5, 5, "T0 + 1.5 s", interval=0.01)
    drop_dentries_and_inodes()
    harness.expect_errno(lambda: os.stat(new), errno.ENOENT)  # the namespace still believes it

    def visible():
        try:
            return os.stat(new).st_size == len(b"second")
        except FileNotFoundError:
            return False

    harness.wait_until(visible, 10, "the new object to be visible", interval=0.02)
    took = time.monotonic() - t0
    print(f"visible {took:.2f} s after the first lookup (negative_ttl 3 s)")
    assert took < 3.75, f"a missing name was believed for {took:.2f} s with negative_ttl=3"


@pytest.mark.parametrize("store", ["http"], indirect=True)
def test_many_missing_names_one_head_each(mount, store):
    """A process polls 100 missing names in one directory (a consumer waiting for the next
    segment of many partitions): each name costs one HEAD per negative_ttl, counted in nginx's
    access log. The namespace used to remember 64 names per directory, so 100 pushed each other
    out and every lookup cost a HEAD."""
    store.put("seg/seg-0000.log", b"first")
    m = mount(store.url, store.options + ["block_size=64K", "negative_ttl=30"], env=store.env)
    assert os.listdir(m.path("seg")) == ["seg-0000.log"]
    names = [f"next-{i:03d}.log" for i in range(100)]
    mark = store.nginx.log_mark()
    for _ in range(3):
        for n in names:
            harness.expect_errno(lambda: os.stat(m.path("seg/" + n)), errno.ENOENT)
    store.nginx.wait_idle()
    asked = [r for r in store.nginx.requests(since=mark) if r.path.startswith("seg/next-")]
    print(f"{len(asked)} requests for 100 missing names polled 3 times")
    assert len(asked) == 100, f"{len(asked)} requests for 100 missing names polled 3 times"


@pytest.mark.parametrize("store", BACKENDS, indirect=True)
def test_new_object_visible_to_readdir(mount, store):
    """metadata_ttl=2: an object uploaded after the directory was listed shows in `ls` within
    metadata_ttl + 0.5 s of the upload (the listing held is served and refreshed in the
    background once older than metadata_ttl; nothing looks the name up here)."""
    ttl = 2
    store.put("seg/seg-001.log", b"first")
    m = mount(store.url, store.options + ["block_size=64K", f"metadata_ttl={ttl}"],
              env=store.env)
    assert os.listdir(m.path("seg")) == ["seg-001.log"]
    store.put("seg/seg-002.log", b"second")
    t0 = time.monotonic()
    bound = ttl + 0.5
    try:
        harness.wait_until(lambda: "seg-002.log" in os.listdir(m.path("seg")),
                           bound + LOAD_MARGIN, "the new object in ls", interval=0.05)
    except TimeoutError:
        pytest.fail(f"a new object was not listed {bound + LOAD_MARGIN:.1f} s after upload "
                    f"(metadata_ttl={ttl})")
    took = time.monotonic() - t0
    print(f"new object listed after {took:.3f} s (bound {bound} s)")
    assert sorted(os.listdir(m.path("seg"))) == ["seg-001.log", "seg-002.log"]
