"""The disk tier's cache_dir against another local user (issue 28, points 1-4; see
docs/security.md, "The disk tier (cache_dir)").

tierfs runs as root, as brokers run it; the attacker is nobody (setpriv --reuid=65534
--regid=65534 --clear-groups), working in a directory of its own under /tmp, as it could in
/tmp itself. pytest's tmp_path is root's and 0700, so the store, the mounts and the legitimate
caches stay out of the attacker's reach there.

1. A cache_dir planted by nobody, holding a segment whose header and CRCs are right for block
   0 of the object (forged from a real cache: nothing in it is secret) but whose bytes are the
   attacker's: the mount is refused with one line, exits non-zero, leaves nothing mounted, and
   serves nothing.
2. A root-owned cache_dir that group or others can write (1777, like /tmp; 0770): refused.
3. A cache_dir of root's, 0755, whose segment files nobody planted (0666) while it was open to
   them: each is removed unread and made anew (root's, 0600). A forged one is never served;
   and after root read the object, nobody can read its bytes from the new files by name, nor
   through a descriptor it kept on an old one.
4. tierfs.lock planted and held (flock) by nobody: in nobody's directory the refusal names the
   owner, not "in use by another tierfs mount"; in a directory of root's, the lock is replaced
   and the mount runs with its disk tier.
5. cache_dir a symbolic link (planted by nobody; with and without a trailing slash): refused,
   and the directory it points at is untouched, file by file (bytes, inode, mtime), including a
   segment with a bad header (which a tier would truncate) and one beyond the ring (which it
   would remove).

Each test fails on the tierfs before issue 28 (which used all of these as they were).
"""

import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

import harness
from lagging_util import stats
from test_disk import (B, DATA, NBLK, REC_DATA, REL, find_record, opts, read_all_written,
                       store, wait_written)  # noqa: F401 (store: a fixture)

NOBODY = 65534
SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
EVIL = (b"EVIL block from uid 65534|" * (B // 26 + 1))[:B]
PY = "/usr/bin/python3"  # nobody cannot run root's pyenv shims
MARK = b"disk:"  # in every block of DATA (test_disk.pattern), in none of EVIL


@pytest.fixture(scope="module", autouse=True)
def _need_setpriv():
    if not shutil.which("setpriv") or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to test as an unprivileged user")


@pytest.fixture
def top():
    """A directory under /tmp that everyone can search; the tests open it further."""
    d = Path(tempfile.mkdtemp(prefix="tierfs-secdisk-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def as_nobody(*cmd, data=None):
    """Run @cmd as nobody, @data on its stdin. @return (returncode, stdout bytes)."""
    p = subprocess.run(SETPRIV + [str(c) for c in cmd], input=data, capture_output=True,
                       timeout=20)
    return p.returncode, p.stdout


def plant(path, data, mode=0o666):
    """nobody writes @data into @path (mode @mode, whatever its umask)."""
    rc, _ = as_nobody("sh", "-c", f'cat > "$1" && chmod {mode:o} "$1"', "sh", path, data=data)
    assert rc == 0, f"nobody could not write {path}"


def holder(*cmd):
    """Start @cmd as nobody; it holds something open until its stdin closes."""
    p = subprocess.Popen(SETPRIV + [str(c) for c in cmd], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"ready\n"
    return p


HOLD_OPEN = """import sys
f = open(sys.argv[1], "rb")
print("ready", flush=True)
sys.stdin.read()
sys.stdout.buffer.write(f.read())
"""

HOLD_LOCK = """import fcntl, sys
f = open(sys.argv[1], "rb")
fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("ready", flush=True)
sys.stdin.read()
"""


def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    return t


CRC_TABLE = _crc_table()


def crc32c(data, crc=0):
    """CRC-32C, continued from @crc as cache/crc32c.h's crc32c(crc, data)."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def forged_segment(mount, store, tmp_path):
    """What an attacker can plant: a real cache of the object (made here by a mount of
    root's; everything in it follows from the URL, the object's name and its ETag), cut to its
    header and block 0's record, with EVIL as block 0's bytes and the record's CRCs made right.
    @return (segment file name, bytes)."""
    legit = tmp_path / "legit"
    m = mount(store.url, opts(legit), name="legit")
    assert read_all_written(m) == DATA
    assert m.unmount() is None
    seg, off = find_record(legit, 0)
    data = bytearray(seg.read_bytes()[:off + REC_DATA + B])
    data[off + REC_DATA:] = EVIL
    key = bytes(data[off + 16:off + 40])  # hi, lo, blk
    struct.pack_into("<I", data, off + 40, crc32c(EVIL, crc32c(key)))
    struct.pack_into("<I", data, off + 44, crc32c(bytes(data[off:off + 44])))
    return seg.name, bytes(data)


def refusal(store, cache, tmp_path, watch=None):
    """Mount with cache_dir=@cache expecting a refusal. @return tierfs's stderr lines. A tierfs
    that mounts instead fails the test, saying whether it served the attacker's bytes and, with
    @watch = (directory, its snapshot before), which of its files changed."""
    mnt = tmp_path / "refused"
    mnt.mkdir()
    harness.Mount.registry.append(str(mnt))
    rc, _, lines = harness.run_tierfs([store.url, str(mnt), "-o", ",".join(opts(cache))])
    if rc == 0 or harness.mounted(mnt):
        try:
            with open(mnt / REL, "rb") as f:
                got = f.read(B)
            what = "the attacker's bytes" if got == EVIL else "the store's bytes"
        finally:
            harness.force_unmount(mnt)
        if watch:
            now = snapshot(watch[0])
            what += "; changed in the target: " + ", ".join(
                n for n in sorted(set(now) | set(watch[1])) if now.get(n) != watch[1].get(n))
        pytest.fail(f"cache_dir={cache} was used (exit {rc}); block 0 served {what}")
    assert not harness.mounted(mnt)
    return lines


def snapshot(d):
    """{name: (sha256, inode, mtime_ns, mode, uid)} of every file in @d, links not followed."""
    out = {}
    for p in sorted(d.iterdir()):
        st = p.lstat()
        h = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
        out[p.name] = (h, st.st_ino, st.st_mtime_ns, st.st_mode, st.st_uid)
    return out


def test_cache_dir_planted_by_another_user_refused(mount, store, tmp_path, top):
    name, forged = forged_segment(mount, store, tmp_path)
    os.chmod(top, 0o1777)  # like /tmp
    cache = top / "cache1"
    assert as_nobody("mkdir", "-m", "0755", cache)[0] == 0
    plant(cache / name, forged)
    before = snapshot(cache)

    lines = refusal(store, cache, tmp_path)
    assert len(lines) == 1, lines
    assert f"cache_dir={cache}: owned by uid {NOBODY}, not 0" in lines[0]
    assert "CacheDirectory=" in lines[0]  # how to fix it
    assert snapshot(cache) == before  # not even a lock file


@pytest.mark.parametrize("mode", [0o1777, 0o770], ids=["1777", "0770"])
def test_cache_dir_others_can_write_refused(mount, store, tmp_path, top, mode):
    name, forged = forged_segment(mount, store, tmp_path)
    cache = top / "cache1"
    cache.mkdir()
    os.chmod(cache, mode)
    if mode & 0o002:
        plant(cache / name, forged)
    before = snapshot(cache)

    lines = refusal(store, cache, tmp_path)
    assert len(lines) == 1, lines
    assert f"cache_dir={cache}: mode {mode:04o} lets" in lines[0]
    assert snapshot(cache) == before


def plant_segments(cache, forged=None):
    """nobody fills @cache (then 0777) with the 16 segment files of opts(), 0666, empty but
    for @forged = (name, bytes); then root closes the directory (0755) and the files stay."""
    os.chmod(cache, 0o777)
    for i in range(16):
        seg = cache / f"seg-{i:04d}.tfs"
        plant(seg, forged[1] if forged and seg.name == forged[0] else b"")


def check_replaced(m, cache):
    """Every segment file was replaced by one of root's, 0600, that nobody can read."""
    replaced = [line for line in m.stderr if "removed unread and made anew" in line]
    assert len(replaced) == 1, m.stderr
    assert "was another user's" in replaced[0] and "(16 files so)" in replaced[0]
    for seg in sorted(cache.glob("seg-*.tfs")):
        st = seg.stat()
        assert (st.st_uid, st.st_mode & 0o7777, st.st_nlink) == (0, 0o600, 1), seg


def test_planted_segment_never_served(mount, store, tmp_path, top):
    """Point 1 of the audit in a directory that is root's and safe now, but was open: the
    forged segment is removed unread, and the reader gets the store's bytes."""
    forged = forged_segment(mount, store, tmp_path)
    cache = top / "cache1"
    cache.mkdir()
    plant_segments(cache, forged)
    os.chmod(cache, 0o755)

    m = mount(store.url, opts(cache), name="a")
    with open(m.path(REL), "rb") as f:
        first = f.read(B)
    if first == EVIL:
        pytest.fail("the forged block was served")
    assert first == DATA[:B]
    assert stats(m.mnt).v("disk_recovered_blocks", "disk") == 0
    check_replaced(m, cache)


def test_planted_segments_leak_nothing(mount, store, tmp_path, top):
    """Point 2 of the audit: nobody planted the segment files 0666 and holds one open. After
    root read the object through the mount and its blocks are on disk, nobody can read them,
    neither by name nor through its old descriptor."""
    cache = top / "cache1"
    cache.mkdir()
    plant_segments(cache)
    held = holder(PY, "-c", HOLD_OPEN, cache / "seg-0000.tfs")
    os.chmod(cache, 0o755)
    try:
        m = mount(store.url, opts(cache), name="a")
        assert read_all_written(m) == DATA
        wait_written(m.mnt, NBLK)
        for seg in sorted(cache.glob("seg-*.tfs")):
            rc, out = as_nobody("cat", seg)
            if MARK in out:
                pytest.fail(f"nobody read root's cached bytes from {seg}")
            assert rc != 0
        check_replaced(m, cache)
    finally:
        out, _ = held.communicate(timeout=20)
    if MARK in out:
        pytest.fail("nobody's old descriptor saw bytes root read")


def test_planted_lock_in_another_users_dir_names_the_owner(store, tmp_path, top):
    os.chmod(top, 0o1777)
    cache = top / "cache1"
    assert as_nobody("mkdir", "-m", "0755", cache)[0] == 0
    plant(cache / "tierfs.lock", b"")
    held = holder(PY, "-c", HOLD_LOCK, cache / "tierfs.lock")
    try:
        lines = refusal(store, cache, tmp_path)
    finally:
        held.communicate(timeout=20)
    assert len(lines) == 1, lines
    assert f"owned by uid {NOBODY}, not 0" in lines[0]
    assert "in use by another tierfs mount" not in lines[0]


def test_planted_lock_held_by_another_user_cannot_block(mount, store, tmp_path, top):
    cache = top / "cache1"
    cache.mkdir()
    os.chmod(cache, 0o1777)
    plant(cache / "tierfs.lock", b"")
    held = holder(PY, "-c", HOLD_LOCK, cache / "tierfs.lock")
    os.chmod(cache, 0o755)
    try:
        m = mount(store.url, opts(cache), name="a")
        assert any("tierfs.lock was another user's" in line for line in m.stderr), m.stderr
        assert read_all_written(m) == DATA  # with its disk tier
        st = (cache / "tierfs.lock").stat()
        assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o600)
        # the new lock keeps a second mount out, as before
        m2 = harness.Mount(store.url, tmp_path / "b", opts(cache), logdir=tmp_path)
        with pytest.raises(harness.MountError) as e:
            m2.start()
        assert "in use by another tierfs mount" in str(e.value)
    finally:
        held.communicate(timeout=20)


@pytest.mark.parametrize("slash", ["", "/"])
def test_cache_dir_symlink_refused_target_untouched(mount, store, tmp_path, top, slash):
    """Point 4 of the audit: through a link, a tier truncated the target's seg-0005.tfs (a bad
    header) and removed its seg-0100.tfs (beyond the ring)."""
    real = tmp_path / "real"
    m = mount(store.url, opts(real), name="legit")
    assert read_all_written(m) == DATA
    assert m.unmount() is None
    (real / "seg-0005.tfs").write_bytes(b"root's file, not a segment header")
    (real / "seg-0100.tfs").write_bytes(b"root's file, beyond the ring")
    before = snapshot(real)
    os.chmod(top, 0o1777)
    link = top / "cache1"
    assert as_nobody("ln", "-s", real, link)[0] == 0

    lines = refusal(store, f"{link}{slash}", tmp_path, watch=(real, before))
    assert len(lines) == 1, lines
    assert f"cache_dir={link}{slash}: is a symbolic link" in lines[0]
    assert snapshot(real) == before
