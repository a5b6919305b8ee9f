"""The disk tier (cache_dir=) on real mounts against a private nginx, whose access log counts
the range GETs that reach the store.

- Restart warm: after a clean unmount, and after kill -9 of tierfs and `fusermount3 -u`, a new
  mount serves the blocks written before with no range GET (the kernel's caches dropped).
- A byte flipped in a segment file while unmounted is caught by the CRC: counted in the
  stats, and the read still returns the right bytes (refetched).
- A second mount on the same cache_dir is refused with a clear message.
- A byte flipped in a segment file while mounted, after the block left the memory tiers (a
  tiny hot tier), is caught and the block refetched.
- A cache_dir of another format version is wiped at mount, with one log line.
- Faults never fail a read: a read-only cache_dir (the mount runs without a disk tier), a
  full one (ENOSPC on a small tmpfs: writes turn off), one deleted under the mount, and EIO
  on reads and on writes. This kernel has no device-mapper (no dm-error or dm-flakey), so
  EIO comes from an LD_PRELOAD shim (eioshim.c, built in tests/ beside tierfs) whose control file
  the test writes while the mount runs.

Each test has its own store and cache directory. Waits poll for a condition with a deadline.
"""

import os
import struct
import subprocess
from pathlib import Path

import pytest

import harness
from lagging_util import stats, xattr

B = 64 << 10
NBLK = 32
SIZE = NBLK * B - 1000  # a short last block
REL = "log/seg-0001.bin"
SEG_HDR = 4096   # the disk tier's format: a segment's header page,
REC_DATA = 4096  # and a record's data a page after the record's header


def pattern(size, tag=b"disk"):
    out = bytearray()
    i = 0
    while len(out) < size:
        out += tag + b":%010d|" % i
        i += 1
    return bytes(out[:size])


DATA = pattern(SIZE)


@pytest.fixture
def store(tmp_path, nginx_factory):
    root = tmp_path / "store"
    (root / "log").mkdir(parents=True)
    (root / REL).write_bytes(DATA)
    return nginx_factory(root)


def opts(cache_dir, *extra):
    # lagging=off: every block is hot, and hot blocks go to disk
    return ["block_size=64K", "hot_size=4M", "lagging=off", f"cache_dir={cache_dir}",
            "disk_size=16M", *extra]


def drop_caches():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def read_all(m):
    with open(m.path(REL), "rb") as f:
        return f.read()


def read_all_written(m):
    """Read the object a block at a time, each block once it is on disk: the write-behind
    queue drops what a faster reader outruns, by design, so a test that needs every block on
    disk waits for each rather than trusting the queue's size. @return the bytes."""
    out = bytearray()
    with open(m.path(REL), "rb") as f:
        for i in range(NBLK):
            out += f.read(B)
            wait_written(m.mnt, i + 1)
    return bytes(out)


def range_gets(srv, since):
    srv.wait_idle()
    return [r for r in srv.gets(REL, since) if r.range]


def fetched_blocks(srv, since, rel=REL):
    """The blocks of @rel fetched since @since (a merged request counts each block)."""
    srv.wait_idle()
    return harness.range_blocks([r for r in srv.gets(rel, since) if r.range], B)


def wait_written(mnt, n):
    try:
        harness.wait_until(lambda: stats(mnt).v("disk_writes_total", "disk") >= n, 20,
                           f"{n} blocks written to disk")
    except TimeoutError as e:
        st = stats(mnt)
        raise TimeoutError(f"{e}: {st.v('disk_writes_total', 'disk'):.0f} written, "
                           f"{st.v('disk_write_drops_total', 'disk'):.0f} dropped") from None


def test_restart_warm_after_clean_unmount(mount, store, tmp_path):
    cache = tmp_path / "cache"
    m = mount(store.url, opts(cache), name="a")
    assert read_all_written(m) == DATA
    wait_written(m.mnt, NBLK)
    assert m.unmount() is None

    drop_caches()
    mark = store.log_mark()
    m2 = mount(store.url, opts(cache), name="b")
    assert read_all(m2) == DATA
    got = range_gets(store, mark)
    assert got == [], f"a warm restart fetched {len(got)} ranges: {got[:3]}"
    st = stats(m2.mnt)
    assert st.v("disk_recovered_blocks", "disk") == NBLK
    assert st.v("cache_hits_total", "disk") >= NBLK
    assert st.v("disk_crc_failures_total", "disk") == 0
    # user.tierfs.cached shows the disk tier's ranges after the memory tiers'
    assert xattr(m2.path(REL), "cached") == f"hot=0-{NBLK - 1} disk=0-{NBLK - 1}"


def test_cached_xattr_shows_disk_ranges(mount, store, tmp_path):
    cache = tmp_path / "cache"
    m = mount(store.url, opts(cache, "readahead=0"), name="a")
    assert xattr(m.path(REL), "cached") == "none"
    with open(m.path(REL), "rb") as f:
        f.seek(4 * B)
        assert f.read(2 * B) == DATA[4 * B:6 * B]
    wait_written(m.mnt, 2)
    assert xattr(m.path(REL), "cached") == "hot=4-5 disk=4-5"


def test_restart_warm_after_kill(store, tmp_path, fuse):
    """kill -9 while the mount is up, fusermount3 -u, mount again: what was written is served
    without a GET."""
    cache = tmp_path / "cache"
    mnt = tmp_path / "mnt-killed"
    m = harness.Mount(store.url, mnt, opts(cache), foreground=True, logdir=tmp_path)
    try:
        m.start()
        assert read_all_written(m) == DATA
        wait_written(m.mnt, NBLK)
        m.proc.kill()
        m.proc.wait(timeout=10)
        rc, err = harness.fusermount_u(mnt)
        assert rc == 0, err
    finally:
        m.unmounted = True
        if harness.mounted(mnt):
            harness.force_unmount(mnt)
        if m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait()

    drop_caches()
    mark = store.log_mark()
    m2 = harness.Mount(store.url, mnt, opts(cache), logdir=tmp_path)
    m2.start()
    try:
        assert read_all(m2) == DATA
        assert range_gets(store, mark) == []
        assert stats(m2.mnt).v("disk_recovered_blocks", "disk") == NBLK
    finally:
        assert m2.unmount() is None


def test_flipped_byte_caught_and_refetched(mount, store, tmp_path):
    cache = tmp_path / "cache"
    m = mount(store.url, opts(cache), name="a")
    assert read_all_written(m) == DATA
    wait_written(m.mnt, NBLK)
    assert m.unmount() is None

    # the first record's data: after the 4 KiB segment header and the record header's page
    segs = sorted(p for p in cache.glob("seg-*.tfs") if p.stat().st_size > 4096)
    assert segs, "no segment file holds a record"
    with open(segs[0], "r+b") as f:
        f.seek(SEG_HDR + REC_DATA + 1000)
        c = f.read(1)
        f.seek(SEG_HDR + REC_DATA + 1000)
        f.write(bytes([c[0] ^ 0x01]))

    drop_caches()
    mark = store.log_mark()
    m2 = mount(store.url, opts(cache), name="b")
    assert read_all(m2) == DATA
    st = stats(m2.mnt)
    assert st.v("disk_crc_failures_total", "disk") == 1
    assert len(fetched_blocks(store, mark)) == 1  # only the bad block is fetched again


def test_second_mount_on_same_cache_dir_refused(mount, store, tmp_path):
    cache = tmp_path / "cache"
    m = mount(store.url, opts(cache), name="a")
    m2 = harness.Mount(store.url, tmp_path / "b", opts(cache), logdir=tmp_path)
    with pytest.raises(harness.MountError) as e:
        m2.start()
    assert "in use by another tierfs mount" in str(e.value)
    assert read_all(m) == DATA


def writes_turn_off(m):
    """Read everything while the disk fails writes: a write error comes, writes turn off, and
    a second read with every kernel cache dropped is whole, with no read error. @return the
    stats after it."""
    assert read_all(m) == DATA
    harness.wait_until(lambda: stats(m.mnt).v("disk_write_errors_total", "disk") >= 1, 20,
                       "a write error")
    drop_caches()
    assert read_all(m) == DATA
    st = stats(m.mnt)
    assert st.v("disk_writable", "disk") == 0
    assert st.v("read_errors_total") == 0
    return st


def _mount_fs(args, target):
    """Mount a small file system on @target. Its root must be given mode=0700: a tmpfs root
    is 1777 by default, and a cache_dir others can write is refused (test_security_disk)."""
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", *args, str(target)], check=True, capture_output=True)


def _umount(target):
    subprocess.run(["umount", str(target)], capture_output=True)


def test_read_only_cache_dir_never_fails_a_read(mount, store, tmp_path):
    ro = tmp_path / "ro"
    try:
        _mount_fs(["-t", "tmpfs", "-o", "size=1M,mode=0700,ro", "tmpfs"], ro)
        m = mount(store.url, opts(ro), name="a")
        assert read_all(m) == DATA
        st = stats(m.mnt)
        assert ("disk_writes_total", "disk") not in st  # mounted without a disk tier
        assert st.v("read_errors_total") == 0
        assert m.unmount() is None
    finally:
        _umount(ro)


def test_full_cache_dir_never_fails_a_read(mount, store, tmp_path):
    """ENOSPC: a 512K tmpfs under a 16M disk_size. Writes turn off; reads go on."""
    full = tmp_path / "full"
    try:
        _mount_fs(["-t", "tmpfs", "-o", "size=512K,mode=0700", "tmpfs"], full)
        m = mount(store.url, opts(full), name="a")
        writes_turn_off(m)
        assert m.unmount() is None
    finally:
        _umount(full)


def test_deleted_cache_dir_never_fails_a_read(mount, store, tmp_path):
    cache = tmp_path / "cache"
    m = mount(store.url, opts(cache), name="a")
    with open(m.path(REL), "rb") as f:
        assert f.read(4 * B) == DATA[:4 * B]
    subprocess.run(["rm", "-rf", str(cache)], check=True)
    assert read_all(m) == DATA
    drop_caches()
    assert read_all(m) == DATA
    assert stats(m.mnt).v("read_errors_total") == 0


OLD_REL = "log/old-0000.bin"
OLD_BLOCKS = 64  # twice and more what the small disk tier below holds


@pytest.mark.parametrize("disk_lagging", ["off", "on"])
def test_replay_and_the_tail_on_disk(mount, tmp_path, nginx_factory, disk_lagging):
    """Why disk_lagging is off by default: a replay of old objects bigger than the disk tier,
    written to disk, rotates the tail's blocks out of it (the ring is FIFO), and the next
    restart fetches the tail again. With the default, the tail survives the replay."""
    root = tmp_path / "store"
    (root / "log").mkdir(parents=True)
    (root / REL).write_bytes(DATA[:8 * B])
    (root / OLD_REL).write_bytes(pattern(OLD_BLOCKS * B, b"old"))
    os.utime(root / OLD_REL, (1600000000, 1600000000))  # 2020: lagging
    srv = nginx_factory(root)
    cache = tmp_path / "cache"
    # a 2M disk tier: 4 segments of 7 records of 64K
    o = ["block_size=64K", "hot_size=4M", "lagging_size=1M", "lagging_rate=0", "readahead=0",
         f"cache_dir={cache}", "disk_size=2M", f"disk_lagging={disk_lagging}"]
    m = mount(srv.url, o, name="a")
    assert read_all(m) == DATA[:8 * B]
    wait_written(m.mnt, 8)
    with open(m.path(OLD_REL), "rb") as f:  # the replay, 8 blocks at a time
        for i in range(OLD_BLOCKS // 8):
            f.read(8 * B)
            harness.wait_until(
                lambda: stats(m.mnt).v("disk_queued_bytes", "disk") == 0, 20, "the queue")
    written = stats(m.mnt).v("disk_writes_total", "disk")
    assert m.unmount() is None

    drop_caches()
    mark = srv.log_mark()
    m2 = mount(srv.url, o, name="b")
    assert read_all(m2) == DATA[:8 * B]
    refetched = len(fetched_blocks(srv, mark))
    print(f"disk_lagging={disk_lagging}: {written:.0f} blocks written, "
          f"tail blocks refetched after the restart: {refetched} of 8")
    if disk_lagging == "off":
        assert written == 8 and refetched == 0
    else:
        assert written > 8 and refetched == 8


# ---- flipped while mounted, another format, EIO ---------------------------------------------

REC_MAGIC = 0x42524654


def rec_size(n):
    return REC_DATA + (n + 4095) // 4096 * 4096


def find_record(cache, blk):
    """(segment path, offset of the record header) of block @blk, the live one: the record of
    the segment's own generation (the header's), at a record boundary."""
    for seg in sorted(cache.glob("seg-*.tfs")):
        data = seg.read_bytes()
        if len(data) < SEG_HDR:
            continue
        gen = struct.unpack_from("<Q", data, 32)[0]
        off = SEG_HDR
        while off + 64 <= len(data):
            magic, n, g, _hi, _lo, b = struct.unpack_from("<IIQQQQ", data, off)
            if magic != REC_MAGIC or g != gen or not n:
                break
            if b == blk:
                return seg, off
            off += rec_size(n)
    return None


def flip_byte(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        c = f.read(1)
        f.seek(off)
        f.write(bytes([c[0] ^ 0x01]))


def test_flipped_byte_while_mounted_caught_and_refetched(mount, store, tmp_path):
    """hot_size at its least (8 blocks): block 0 has left memory when the last block is read,
    and only the disk tier holds it when its byte flips under the mount."""
    cache = tmp_path / "cache"
    o = ["block_size=64K", "hot_size=512K", "lagging=off", f"cache_dir={cache}",
         "disk_size=16M"]
    m = mount(store.url, o, name="a")
    assert read_all(m) == DATA
    harness.wait_until(lambda: "disk=0" in xattr(m.path(REL), "cached"), 20, "block 0 on disk")

    def evicted():
        """Is block 0 out of memory? If not, read the other blocks again: a reply that pinned
        every segment of the ring while they were fetched made them bounce, not evict."""
        if not xattr(m.path(REL), "cached").startswith("hot=0"):
            return True
        drop_caches()
        with open(m.path(REL), "rb") as f:
            f.seek(8 * B)
            assert f.read() == DATA[8 * B:]
        return False

    harness.wait_until(evicted, 20, "block 0 to leave the memory tiers")
    found = find_record(cache, 0)
    assert found, "no record of block 0"
    flip_byte(found[0], found[1] + REC_DATA + 777)

    drop_caches()  # the kernel's copy of the file, so the read reaches tierfs
    mark = store.log_mark()
    with open(m.path(REL), "rb") as f:
        assert f.read(B) == DATA[:B]
    st = stats(m.mnt)
    assert st.v("disk_crc_failures_total", "disk") == 1
    assert st.v("read_errors_total") == 0
    got = fetched_blocks(store, mark)
    assert got == [0], got  # block 0, refetched


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_other_format_version_wiped_with_one_line(mount, store, tmp_path):
    """A cache_dir whose segment headers say another format version (as another tierfs would
    write it, the header's CRC right) is wiped at mount with one log line: nothing of it is
    served, every block comes from the store again, and is written again."""
    cache = tmp_path / "cache"
    m = mount(store.url, opts(cache), name="a")
    assert read_all_written(m) == DATA
    assert m.unmount() is None
    for seg in cache.glob("seg-*.tfs"):
        with open(seg, "r+b") as f:
            h = bytearray(f.read(48))
            if len(h) < 48:
                continue
            struct.pack_into("<I", h, 8, struct.unpack_from("<I", h, 8)[0] + 1)  # version
            struct.pack_into("<I", h, 44, crc32c(bytes(h[:44])))
            f.seek(0)
            f.write(h)

    drop_caches()
    mark = store.log_mark()
    m2 = mount(store.url, opts(cache), name="b")
    lines = [l for l in m2.stderr if "wiped" in l]
    assert len(lines) == 1, m2.stderr
    assert "another format version" in lines[0]
    assert read_all_written(m2) == DATA
    st = stats(m2.mnt)
    assert st.v("disk_recovered_blocks", "disk") == 0
    assert st.v("disk_crc_failures_total", "disk") == 0
    assert fetched_blocks(store, mark) == list(range(NBLK))


def shim_env(tmp_path, name, ctl):
    shim = Path(harness.tierfs_bin()).parent / "tests" / "eioshim.so"
    assert shim.is_file(), f"{shim}: build it (meson builds it with the tests)"
    ctl.write_text("")
    asan = harness.sanitizer_env(tmp_path / f"san-{name}")["ASAN_OPTIONS"]
    return {"LD_PRELOAD": str(shim), "TIERFS_EIO_CTL": str(ctl),
            "ASAN_OPTIONS": asan + ":verify_asan_link_order=0"}


def test_eio_on_read_never_fails_a_read(mount, store, tmp_path):
    """Every read of a segment file fails with EIO: each block is dropped from the disk
    tier, counted, and fetched from the store; the reader sees the right bytes, no error."""
    cache = tmp_path / "cache"
    ctl = tmp_path / "eio"
    m = mount(store.url, opts(cache), name="a")
    assert read_all_written(m) == DATA
    assert m.unmount() is None

    m2 = mount(store.url, opts(cache), env=shim_env(tmp_path, "b", ctl), name="b")
    assert stats(m2.mnt).v("disk_recovered_blocks", "disk") == NBLK  # read before the fault
    ctl.write_text("read")
    drop_caches()
    mark = store.log_mark()
    assert read_all(m2) == DATA
    st = stats(m2.mnt)
    assert st.v("disk_read_errors_total", "disk") >= 1
    assert st.v("cache_hits_total", "disk") == 0
    assert st.v("read_errors_total") == 0
    assert fetched_blocks(store, mark) == list(range(NBLK))


def test_eio_on_write_never_fails_a_read(mount, store, tmp_path):
    """Writes fail with EIO once the first blocks are on disk: writes turn off (counted),
    reads go on from memory and the store, and the blocks written before are still served
    from disk after a restart."""
    cache = tmp_path / "cache"
    ctl = tmp_path / "eio"
    m = mount(store.url, opts(cache, "readahead=0"), env=shim_env(tmp_path, "a", ctl),
              name="a")
    with open(m.path(REL), "rb") as f:
        assert f.read(8 * B) == DATA[:8 * B]
    wait_written(m.mnt, 8)
    harness.wait_until(lambda: stats(m.mnt).v("disk_queued_bytes", "disk") == 0, 20,
                       "the queue")
    w = stats(m.mnt).v("disk_writes_total", "disk")  # 8, or more: the kernel reads ahead
    assert w < NBLK
    ctl.write_text("write")
    st = writes_turn_off(m)
    assert st.v("disk_writes_total", "disk") == w
    assert m.unmount() is None

    drop_caches()
    mark = store.log_mark()
    m2 = mount(store.url, opts(cache), name="b")
    assert read_all(m2) == DATA
    assert stats(m2.mnt).v("disk_recovered_blocks", "disk") == w
    assert len(fetched_blocks(store, mark)) == NBLK - w
