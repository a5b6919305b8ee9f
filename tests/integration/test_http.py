"""tierfs over HTTP(S) from nginx: the tree and bytes, TLS trust, single-flight fetches (counted
in nginx's access log), no fetch for what is not read, and a server that dies mid-read."""

import errno
import mmap
import os
import signal
import threading
import time

import pytest

import corpus
import harness
from harness import B64K

OPTS = ["block_size=64K"]
MIB = 1 << 20


def test_http_tree_and_content(mount, nginx, corpus64k):
    m = mount(nginx.url, OPTS)
    files = corpus.assert_same_tree(m.mnt, corpus64k.root)
    corpus.assert_same_content(m.mnt, corpus64k.root, files)


def test_http_mtime_from_server(mount, nginx, corpus64k):
    """nginx sends each file's mtime (Last-Modified, autoindex mtime): the mount shows it."""
    m = mount(nginx.url, OPTS)
    bad = []
    for rel in sorted(corpus64k.objs):
        want = os.stat(corpus64k.root / rel).st_mtime_ns // 10**9
        got = os.stat(m.path(rel)).st_mtime_ns // 10**9
        if want != got:
            bad.append((rel, want, got))
    assert not bad, f"{len(bad)} mtimes differ (path, source, mount): {bad[:10]}"


def test_http_pread_odd_offsets(mount, nginx, corpus64k):
    m = mount(nginx.url, OPTS)
    for rel in ["three-blocks-17.bin", "block-plus-1.bin", "names/percent%20literal.bin"]:
        corpus.assert_preads(m.mnt, corpus64k.root, rel, B64K)


def test_http_subdirectory_url(mount, nginx, corpus64k):
    src = corpus64k.root / "some" / "prefix"
    m = mount(nginx.url + "some/prefix/", OPTS)
    files = corpus.assert_same_tree(m.mnt, src)
    corpus.assert_same_content(m.mnt, src, files)


def test_http_manifest_names_each_directory_once(mount, nginx, corpus64k, tmp_path):
    """-o manifest=FILE (a server without an index): the tree comes from the manifest's
    paths. Every entry a listing passes on counts towards its bound (backend.c), so a
    directory must be one entry of its parent however many paths lie beneath it: with the
    bound lowered to the number of names the root really holds, the root lists and files
    deep down read right, while many/ (more names than that) fails with EFBIG."""
    files = sorted(str(p.relative_to(corpus64k.root)) for p in corpus64k.root.rglob("*")
                   if p.is_file())
    manifest = tmp_path / "manifest"
    manifest.write_text("\n".join(files) + "\n")
    top = {f.split("/")[0] for f in files}
    many = [f for f in files if f.startswith("many/")]
    assert len(many) > len(top) and len(files) > len(top)
    m = mount(nginx.url, OPTS + [f"manifest={manifest}"],
              env={"TIERFS_LIST_MAX_KEYS": str(len(top))})
    assert set(os.listdir(m.mnt)) == top
    corpus.assert_same_content(m.mnt, corpus64k.root, ["some/prefix/deeper/x y+z.bin",
                                                       "deep/l1/l2/2.bin", "one.bin"])
    harness.expect_errno(lambda: os.listdir(m.path("many")), errno.EFBIG)


def test_https_with_ca_file(mount, nginx, corpus64k, tls):
    m = mount(nginx.https_url, OPTS + [f"ca_file={tls[0]}"])
    files = corpus.assert_same_tree(m.mnt, corpus64k.root)
    corpus.assert_same_content(m.mnt, corpus64k.root, files)


def test_https_insecure(mount, nginx, corpus64k):
    m = mount(nginx.https_url, OPTS + ["insecure"])
    corpus.assert_same_content(m.mnt, corpus64k.root, ["three-blocks-17.bin", "dïr/ø ünï.log"])


def test_https_untrusted_fails_at_mount(nginx, mountpoint, tierfs_bin):
    """The program probes the store before mounting, so an untrusted certificate is a mount
    error: non-zero exit, one line on stderr, nothing mounted."""
    rc, _, err = harness.run_tierfs([nginx.https_url, str(mountpoint), "-o", "block_size=64K"],
                                    timeout=30)
    if harness.mounted(mountpoint):
        harness.force_unmount(mountpoint)
        pytest.fail(f"exit status {rc}, and mounted over an untrusted certificate")
    assert rc != 0, f"exit status 0 over an untrusted certificate (stderr {err})"
    assert len(err) == 1 and err[0].strip(), f"want exactly one line on stderr, got {err}"


def _read_blocks(path, nblocks, start, direct, barrier, out, i):
    """Read blocks start, start+1, ... (wrapping) of @path into out[i] = {block: bytes}."""
    try:
        flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
        fd = os.open(path, flags)
        buf = mmap.mmap(-1, B64K)  # page-aligned, as O_DIRECT wants
        got = {}
        try:
            barrier.wait(timeout=30)
            for k in range(nblocks):
                blk = (start + k) % nblocks
                data = bytearray()
                while len(data) < B64K:  # a short read is legal; go on from where it stopped
                    n = os.preadv(fd, [buf], blk * B64K + len(data))
                    if n == 0:
                        break
                    data += buf[:min(n, B64K - len(data))]
                got[blk] = bytes(data)
        finally:
            os.close(fd)
        out[i] = got
    except BaseException as e:  # reported by the test
        barrier.abort()
        out[i] = e


@pytest.mark.concurrency
def test_single_flight_across_readers(mount, nginx, corpus64k):
    """8 threads read the same cold 1 MiB object (16 blocks of 64K) at once, four from block 0
    and four from block 8, so each block is wanted by several readers at the same moment; half
    of them use O_DIRECT so the page cache does not serialize them. nginx must see exactly one
    GET per block."""
    rel, size = "mib.bin", MIB
    nblocks = size // B64K
    data = (corpus64k.root / rel).read_bytes()
    m = mount(nginx.url, OPTS)
    mark = nginx.log_mark()
    path = m.path(rel)
    barrier = threading.Barrier(8)
    out = [None] * 8
    threads = [
        threading.Thread(target=_read_blocks,
                         args=(path, nblocks, 0 if i < 4 else nblocks // 2, i % 2 == 1,
                               barrier, out, i),
                         daemon=True)
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a reader hung for 60 s"
    for i, got in enumerate(out):
        if isinstance(got, BaseException):
            raise AssertionError(f"reader {i} failed: {got!r}") from got
        bad = [b for b in range(nblocks) if got[b] != data[b * B64K:(b + 1) * B64K]]
        assert not bad, f"reader {i} got wrong bytes in blocks {bad}"
    wait_for_gets(nginx, rel, mark, nblocks)
    gets = nginx.gets(rel, since=mark)
    ranges = sorted(g.byte_range(size) or (g.range, g.status) for g in gets)
    want = [(k * B64K, (k + 1) * B64K - 1) for k in range(nblocks)]
    assert ranges == want, (
        f"want one GET per block ({nblocks}), got {len(gets)}: "
        f"{[(g.range, g.status) for g in gets]}")
    assert all(g.status == 206 for g in gets), [(g.range, g.status) for g in gets]


def wait_for_gets(nginx, rel, mark, n):
    """Wait for at least @n GETs of @rel in the log, then for nginx to be idle, so that any
    extra GET still in flight is counted too."""
    try:
        harness.wait_until(lambda: len(nginx.gets(rel, since=mark)) >= n, 10,
                           f"{n} GETs of {rel} in the access log")
    except TimeoutError:
        pass  # the assertion that follows reports what was seen
    nginx.wait_idle()


def test_range_gets_carry_if_match(mount, nginx, corpus64k):
    """Block fetches name the object version: If-Match with the ETag nginx gave."""
    rel = "three-blocks-17.bin"
    m = mount(nginx.url, OPTS)
    mark = nginx.log_mark()
    corpus.assert_same_content(m.mnt, corpus64k.root, [rel])
    nginx.wait_idle()
    gets = nginx.gets(rel, since=mark)
    assert gets, "no GET logged"
    etag = nginx.etag(rel)
    logged = etag.replace('"', "\\x22")  # nginx escapes '"' in the log
    bad = [(g.range, g.if_match) for g in gets if g.if_match != logged]
    assert not bad, f"GETs without If-Match: {etag}: {bad}"


def test_unread_file_causes_no_get(mount, nginx, corpus64k):
    mark = nginx.log_mark()
    m = mount(nginx.url, OPTS)
    files, _ = corpus.walk_tree(m.mnt)  # readdir and stat everything
    assert "untouched.bin" in files
    os.stat(m.path("untouched.bin"))
    corpus.assert_same_content(m.mnt, corpus64k.root, ["block.bin", "three-blocks-17.bin"])
    nginx.wait_idle()
    assert nginx.gets("block.bin", since=mark), "the log shows no GET of a file that was read"
    gets = nginx.gets("untouched.bin", since=mark)
    assert not gets, f"GETs of a file never read: {[(g.range, g.status) for g in gets]}"


# ---------------------------------------------------------------------------------------------
# a server that dies or freezes in the middle of a read


BIG = 64 * MIB
# How long a read may take to fail once the server is gone, with timeout=3,retries=1. Not
# 2 x 3 s: the fetches the kernel's and tierfs's readahead queued ahead of the reader (more
# than max_conns) each wait their turn and time out in waves; a frozen server took 15-25 s
# here. Past this the reader counts as hung.
HANG = 45


@pytest.fixture
def big_nginx(tmp_path, nginx_factory):
    root = tmp_path / "big"
    corpus.build_one(root, "big.bin", BIG)
    return nginx_factory(root)


def _slow_reader(path, src, progress, go, result):
    """Read @path in 256K pieces, checking bytes against @src; after 2 MiB, signal @progress
    and wait for @go; record how it ended in @result."""
    try:
        with open(path, "rb", buffering=0) as f, open(src, "rb") as s:
            off = 0
            while True:
                if off >= 2 * MIB and not progress.is_set():
                    progress.set()
                    go.wait(60)
                    result["t_go"] = time.monotonic()
                try:
                    b = f.read(256 * 1024)
                except OSError as e:
                    result.update(error=e, off=off, t_end=time.monotonic())
                    return
                if not b:
                    result.update(eof=off, t_end=time.monotonic())
                    return
                if b != s.read(len(b)):
                    result.update(mismatch=off, t_end=time.monotonic())
                    return
                off += len(b)
    except BaseException as e:
        result.update(crash=e, t_end=time.monotonic())


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_server_dies_mid_read(mount, big_nginx, how):
    """Mount with timeout=3,retries=1; once a reader is 2 MiB into a 64 MiB object, the server
    is killed (SIGKILL) or frozen (SIGSTOP). The reader must get EIO or ETIMEDOUT soon, not
    hang, and the mount must still unmount cleanly."""
    m = mount(big_nginx.url, OPTS + ["timeout=3", "retries=1"])
    progress, go, result = threading.Event(), threading.Event(), {}
    t = threading.Thread(target=_slow_reader, daemon=True,
                         args=(m.path("big.bin"), big_nginx.root / "big.bin", progress, go,
                               result))
    t.start()
    if not progress.wait(60):
        go.set()
        pytest.fail(f"the reader did not get 2 MiB in 60 s: {result}")
    if how == "killed":
        big_nginx.kill()
    else:
        big_nginx.signal(signal.SIGSTOP)
    go.set()
    t.join(timeout=HANG)
    assert not t.is_alive(), f"the reader still hangs {HANG} s after the server was {how}"
    assert "error" in result, f"no read error after the server was {how}: {result}"
    e = result["error"]
    took = result["t_end"] - result["t_go"]
    assert e.errno in (errno.EIO, errno.ETIMEDOUT), (
        f"want EIO or ETIMEDOUT, got {errno.errorcode.get(e.errno, e.errno)} ({e})")
    assert took < HANG, f"the error took {took:.1f} s (timeout=3, retries=1)"
    assert m.unmount() is None, "the mount did not unmount cleanly"
