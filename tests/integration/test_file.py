"""tierfs over file:///dir: the tree, the bytes, stat, odd reads, read-only-ness, the CLI."""

import errno
import os
import re
import stat
import subprocess
import time

import pytest

import corpus
import harness
from harness import B4M, B64K

OPTS = ["block_size=64K"]

PREAD_FILES = [
    "empty.bin", "one.bin", "block.bin", "block-minus-1.bin", "block-plus-1.bin",
    "three-blocks-17.bin", "mib.bin", "random/r0.bin", "random/r3.bin", "dïr/ø ünï.log",
]


def test_tree_matches_source(mount, corpus64k):
    m = mount(corpus64k.url, OPTS)
    files = corpus.assert_same_tree(m.mnt, corpus64k.root)
    assert len(files) == len(corpus64k.objs)


def test_content_matches_source(mount, corpus64k):
    m = mount(corpus64k.url, OPTS)
    corpus.assert_same_content(m.mnt, corpus64k.root, corpus64k.objs)


def test_stat_size_mtime_and_type(mount, corpus64k):
    m = mount(corpus64k.url, OPTS)
    bad = []
    for rel in sorted(corpus64k.objs):
        src = os.stat(corpus64k.root / rel)
        st = os.stat(m.path(rel))
        if not stat.S_ISREG(st.st_mode):
            bad.append((rel, "not a regular file", oct(st.st_mode)))
        if st.st_size != src.st_size:
            bad.append((rel, "size", src.st_size, st.st_size))
        if st.st_mtime_ns // 10**9 != src.st_mtime_ns // 10**9:
            bad.append((rel, "mtime", src.st_mtime_ns // 10**9, st.st_mtime_ns // 10**9))
    for d in ["names", "dïr", "a/b/c/d/e/f", "many", "some/prefix"]:
        if not stat.S_ISDIR(os.stat(m.path(d)).st_mode):
            bad.append((d, "not a directory"))
    assert not bad, f"{len(bad)} stat mismatches: {bad[:15]}"


@pytest.mark.parametrize("rel", PREAD_FILES)
def test_pread_odd_offsets_across_blocks(mount, corpus64k, rel):
    m = mount(corpus64k.url, OPTS)
    corpus.assert_preads(m.mnt, corpus64k.root, rel, B64K)


def test_ls_lR(mount, corpus64k):
    m = mount(corpus64k.url, OPTS)
    p = subprocess.run(["ls", "-lR", str(m.mnt)], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert p.stderr == b""
    out = p.stdout.decode()
    for name in ["obj-1099.txt", "ø ünï.log", "percent%20literal.bin", "plus+sign.bin"]:
        assert name in out, f"ls -lR output lacks {name!r}"


def test_writes_fail_with_erofs(mount, corpus64k, tmp_path):
    m = mount(corpus64k.url, OPTS)
    f = m.path("block.bin")
    d = m.path("names")
    ops = {
        "open existing for write": lambda: os.close(os.open(f, os.O_WRONLY)),
        "open existing read-write": lambda: os.close(os.open(f, os.O_RDWR)),
        "open with O_TRUNC": lambda: os.close(os.open(f, os.O_RDONLY | os.O_TRUNC)),
        "create": lambda: os.close(os.open(m.path("new.bin"), os.O_WRONLY | os.O_CREAT, 0o644)),
        "mkdir": lambda: os.mkdir(m.path("newdir")),
        "rmdir": lambda: os.rmdir(m.path("a/b/c/d/e/f")),
        "unlink": lambda: os.unlink(f),
        "rename": lambda: os.rename(f, m.path("renamed.bin")),
        "truncate": lambda: os.truncate(f, 1),
        "chmod": lambda: os.chmod(f, 0o600),
        "chown": lambda: os.chown(f, 1, 1),
        "utime": lambda: os.utime(f, (1, 1)),
        "symlink": lambda: os.symlink("block.bin", m.path("link")),
        "link": lambda: os.link(f, os.path.join(d, "hard")),
    }
    wrong = []
    for name, op in ops.items():
        try:
            op()
            wrong.append((name, "succeeded"))
        except OSError as e:
            if e.errno != errno.EROFS:
                wrong.append((name, errno.errorcode.get(e.errno, e.errno)))
    assert not wrong, f"expected EROFS from every write: {wrong}"
    # Nothing changed underneath.
    src = corpus64k.root / "block.bin"
    assert os.stat(src).st_size == B64K
    assert not (corpus64k.root / "newdir").exists()


def test_missing_path_is_enoent(mount, corpus64k):
    m = mount(corpus64k.url, OPTS)
    harness.expect_errno(lambda: os.stat(m.path("no-such-object")), errno.ENOENT)
    harness.expect_errno(lambda: open(m.path("no/such/dir/obj"), "rb"), errno.ENOENT)
    harness.expect_errno(lambda: os.listdir(m.path("no-such-dir")), errno.ENOENT)
    # A name that is only a prefix of a real one is not a path.
    harness.expect_errno(lambda: os.stat(m.path("some/pref")), errno.ENOENT)
    harness.expect_errno(lambda: os.stat(m.path("block.bi")), errno.ENOENT)


def test_subdirectory_url(mount, corpus64k):
    m = mount("file://" + str(corpus64k.root / "some" / "prefix"), OPTS)
    files = corpus.assert_same_tree(m.mnt, corpus64k.root / "some" / "prefix")
    corpus.assert_same_content(m.mnt, corpus64k.root / "some" / "prefix", files)


def test_default_block_size_4m(mount, corpus4m):
    m = mount(corpus4m.url)
    files = corpus.assert_same_tree(m.mnt, corpus4m.root)
    corpus.assert_same_content(m.mnt, corpus4m.root, files)
    for rel in ["three-blocks-17.bin", "block-plus-1.bin", "mib.bin"]:
        corpus.assert_preads(m.mnt, corpus4m.root, rel, B4M)


def test_exit_status_zero_means_mounted(mount, corpus64k):
    m = mount(corpus64k.url, OPTS)
    assert m.mounted_at_exit, "tierfs exited 0 before the mount was in place"
    assert m.pids, "no tierfs process serves the mount after it daemonized"


def test_foreground_mode(mount, corpus64k):
    m = mount(corpus64k.url, OPTS, foreground=True)
    assert m.proc.poll() is None, "tierfs -f is not running while mounted"
    corpus.assert_same_content(m.mnt, corpus64k.root, ["three-blocks-17.bin", "names/tilde~x.bin"])
    assert m.unmount() is None
    assert m.proc.returncode == 0, f"tierfs -f exited {m.proc.returncode} after unmount"


# ---------------------------------------------------------------------------------------------
# the command line


BAD = {
    "unknown option": lambda url, mnt: [url, mnt, "-o", "no_such_option=1"],
    "block_size not a power of two": lambda url, mnt: [url, mnt, "-o", "block_size=3M"],
    "block_size too small": lambda url, mnt: [url, mnt, "-o", "block_size=16K"],
    "hot_size not a size": lambda url, mnt: [url, mnt, "-o", "hot_size=abc"],
    "missing mountpoint": lambda url, mnt: [url],
    "unsupported scheme": lambda url, mnt: ["ftp://x", mnt],
    "nonexistent directory": lambda url, mnt: ["file:///nope-tierfs-no-such-dir", mnt],
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_invocation_fails_with_one_line(corpus64k, mountpoint, tierfs_bin, case):
    args = BAD[case](corpus64k.url, str(mountpoint))
    t0 = time.monotonic()
    try:
        rc, out, err = harness.run_tierfs(args, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tierfs {args} did not exit within 10 s")
    took = time.monotonic() - t0
    if harness.mounted(mountpoint):
        harness.force_unmount(mountpoint)
        pytest.fail(f"{case}: exit status {rc}, and a mount was left at {mountpoint}")
    assert rc != 0, f"{case}: exit status 0 (stderr {err})"
    assert len(err) == 1 and err[0].strip(), f"{case}: want exactly one line on stderr, got {err}"
    assert took < 5, f"{case}: took {took:.1f}s to fail"


OPTIONS = [
    "block_size", "hot_size", "hot_ttl", "lagging", "lagging_size", "lagging_ttl",
    "lagging_rate", "lagging_burst", "lagging_ops", "readahead", "metadata_ttl", "immutable",
    "endpoint", "region", "path_style", "profile", "credentials", "manifest", "max_conns",
    "timeout", "retries", "ca_file", "insecure",
]


def test_help_lists_every_option(tierfs_bin):
    rc, out, err = harness.run_tierfs(["--help"], timeout=10)
    assert rc == 0, f"--help exited {rc}: {err}"
    text = out + "\n".join(err)
    missing = [o for o in OPTIONS if not re.search(rf"(?<![\w]){o}(?![\w])", text)]
    assert not missing, f"--help does not mention {missing}"


def test_version(tierfs_bin):
    rc, out, err = harness.run_tierfs(["--version"], timeout=10)
    assert rc == 0, f"--version exited {rc}: {err}"
    text = out + "\n".join(err)
    assert re.search(r"\d+\.\d+(\.\d+)?", text), f"--version printed no version: {text!r}"
