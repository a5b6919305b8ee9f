"""A file:// mount shared with other users: it stays beneath its root, never opens a FIFO, and
shows modes the kernel enforces (issue 9, points 2 and "permissions").

The mounts run as root with allow_other, as brokers run them; every read that matters is made
by an unprivileged user (setpriv --reuid=65534 --regid=65534 --clear-groups). pytest's
tmp_path is 0700 and root's, so the mountpoints live in a world-searchable directory of their
own; the stores stay inside tmp_path, where nobody can read them directly.

The confinement tests run twice: with openat2 (RESOLVE_BENEATH), and with the component walk
used on kernels without it (TIERFS_FILE_NO_OPENAT2=1), where no symlink is followed at all.
"""

import errno
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

import harness

NOBODY = 65534
SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
CMD_TIMEOUT = 20  # a hang shows as a timeout; the loaded machine needs far less

SHADOW = Path("/etc/shadow")


def as_nobody(*cmd, timeout=CMD_TIMEOUT):
    """Run @cmd as nobody; return (returncode, stdout bytes, stderr text). A command that
    does not finish in @timeout seconds fails the test (it would have hung)."""
    try:
        p = subprocess.run(SETPRIV + [str(c) for c in cmd], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(map(str, cmd))} as nobody hung for {timeout}s")
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def nobody_reads(path):
    """The bytes nobody gets from cat @path, or None if cat failed."""
    rc, out, _ = as_nobody("cat", path)
    return out if rc == 0 else None


@pytest.fixture(scope="module", autouse=True)
def _need_setpriv():
    if not shutil.which("setpriv") or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to test as an unprivileged user")


@pytest.fixture
def shared_mount(fuse, tmp_path):
    """shared_mount(store, options=[...], env={...}) -> harness.Mount with allow_other, on a
    mountpoint that nobody can reach. Unmounted at teardown (a lazy unmount fails the test)."""
    top = Path(tempfile.mkdtemp(prefix="tierfs-sec-", dir="/tmp"))
    os.chmod(top, 0o755)
    mounts = []
    releases = []

    def do(store, options=(), env=None):
        mnt = top / f"mnt{len(mounts)}"
        m = harness.Mount("file://" + str(store), mnt, ["allow_other", *options], env=env,
                          logdir=tmp_path)
        mounts.append(m)
        m.start()
        return m

    do.releases = releases  # callables that unblock a server stuck on a FIFO (old binaries)
    yield do
    for r in releases:
        r()
    problems = [p for p in (m.unmount() for m in mounts) if p]
    shutil.rmtree(top, ignore_errors=True)
    if problems:
        pytest.fail("unmount: " + " / ".join(problems))


def release_fifo(path):
    """Open @path for writing without blocking: a reader stuck in open() of the FIFO goes on
    (and sees EOF once we close it). ENXIO means nobody is waiting."""
    def go():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
    return go


WALK = {"TIERFS_FILE_NO_OPENAT2": "1"}


@pytest.fixture(params=["openat2", "walk"])
def resolver(request):
    return None if request.param == "openat2" else WALK


def make_store(root):
    """A store seeded with everything that must not escape, and files that must work."""
    root.mkdir()
    (root / "pub.txt").write_bytes(b"public bytes\n")
    (root / "data").mkdir()
    (root / "data" / "real.bin").write_bytes(b"R" * 5000)
    outside = root.parent / "outside-secret.txt"
    outside.write_bytes(b"outside the root\n")
    os.symlink("/etc/shadow", root / "shadowlink")
    os.symlink("/", root / "rootlink")
    os.symlink("/etc", root / "etclink")
    os.symlink("../outside-secret.txt", root / "uplink")
    os.symlink("..", root / "dotdot")
    os.symlink(str(root / "pub.txt"), root / "abslink")  # absolute, even if it points inside
    os.symlink("../../outside-secret.txt", root / "data" / "deep-up")
    os.symlink("/proc/self/root/etc/shadow", root / "magic")
    os.symlink("data/real.bin", root / "inlink")  # relative, inside: followed (openat2)
    os.symlink("../pub.txt", root / "data" / "back")
    os.symlink("data", root / "dirlink")  # a directory: hidden (no loops)
    os.symlink(".", root / "loop")
    os.symlink("nowhere", root / "dangling")
    return root


ESCAPES = ["shadowlink", "rootlink", "etclink", "uplink", "dotdot", "abslink", "magic",
           "data/deep-up", "dirlink", "loop", "dangling"]


def test_symlinks_out_of_root_are_never_followed(shared_mount, tmp_path, resolver):
    store = make_store(tmp_path / "store")
    m = shared_mount(store, env=resolver)
    names = set(os.listdir(m.path()))
    assert {"pub.txt", "data"} <= names
    leaked = []
    for rel in ESCAPES:
        if os.path.basename(rel) in os.listdir(m.path(os.path.dirname(rel))):
            leaked.append((rel, "listed"))
        harness.expect_errno(lambda: os.stat(m.path(rel)), errno.ENOENT)
        got = nobody_reads(m.path(rel))
        if got is not None:
            leaked.append((rel, "read by nobody", got[:40]))
    # the classic paths through a followed root link
    for rel in ["rootlink/etc/shadow", "etclink/shadow", "dotdot/outside-secret.txt",
                "dirlink/real.bin", "loop/pub.txt"]:
        got = nobody_reads(m.path(rel))
        if got is not None:
            leaked.append((rel, "read by nobody", got[:40]))
        rc, out, _ = as_nobody("ls", m.path(os.path.dirname(rel)))
        if rc == 0:
            leaked.append((rel, "listable by nobody", out[:80]))
    # root, through the mount, gets no bytes from outside either
    for rel in ["shadowlink", "uplink", "rootlink/etc/shadow"]:
        harness.expect_errno(lambda: Path(m.path(rel)).read_bytes(), errno.ENOENT)
    assert not leaked, leaked
    # the store's own files still work
    assert nobody_reads(m.path("pub.txt")) == b"public bytes\n"
    assert nobody_reads(m.path("data/real.bin")) == b"R" * 5000


def test_symlinks_inside_root_to_files_are_followed(shared_mount, tmp_path):
    """The documented choice: a relative symlink that stays beneath the root and names a
    regular file reads as that file; one to a directory is hidden."""
    store = make_store(tmp_path / "store")
    m = shared_mount(store)
    assert "inlink" in os.listdir(m.path())
    assert "back" in os.listdir(m.path("data"))
    st = os.stat(m.path("inlink"))
    assert stat.S_ISREG(st.st_mode) and st.st_size == 5000
    assert nobody_reads(m.path("inlink")) == b"R" * 5000
    assert nobody_reads(m.path("data/back")) == b"public bytes\n"
    assert "dirlink" not in os.listdir(m.path())


def test_symlinks_hidden_without_openat2(shared_mount, tmp_path):
    store = make_store(tmp_path / "store")
    m = shared_mount(store, env=WALK)
    names = set(os.listdir(m.path()))
    assert "inlink" not in names and "pub.txt" in names
    assert nobody_reads(m.path("data/real.bin")) == b"R" * 5000


def test_directory_swapped_for_symlink_after_listing(shared_mount, tmp_path, resolver):
    """A directory listed while it was real, then replaced by a symlink to /etc: the names the
    mount already knows must not resolve through the link (the open, not only the listing,
    stays beneath the root)."""
    store = tmp_path / "store"
    (store / "d").mkdir(parents=True)
    (store / "d" / "shadow").write_bytes(b"harmless\n")
    (store / "d" / "passwd").write_bytes(b"harmless too\n")
    m = shared_mount(store, ["metadata_ttl=3600"], env=resolver)
    assert sorted(os.listdir(m.path("d"))) == ["passwd", "shadow"]
    os.stat(m.path("d/shadow"))
    os.stat(m.path("d/passwd"))
    shutil.rmtree(store / "d")
    os.symlink("/etc", store / "d")
    secret = SHADOW.read_bytes()
    passwd = Path("/etc/passwd").read_bytes()
    # the first read may fail as stale; the second revalidates: neither may give /etc bytes
    for _ in range(3):
        got = nobody_reads(m.path("d/shadow"))
        assert got != secret and (got is None or b"root:" not in got), got
        got = nobody_reads(m.path("d/passwd"))
        assert got != passwd and (got is None or b"root:" not in got), got


def test_store_0600_file_not_readable_by_others(shared_mount, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "private.key").write_bytes(b"-----BEGIN PRIVATE KEY-----\n")
    os.chmod(store / "private.key", 0o600)
    (store / "group.txt").write_bytes(b"group only\n")
    os.chmod(store / "group.txt", 0o640)
    (store / "world.txt").write_bytes(b"everyone\n")
    os.chmod(store / "world.txt", 0o644)
    (store / "sealed").mkdir()
    (store / "sealed" / "inner.txt").write_bytes(b"inside a 0700 directory\n")
    os.chmod(store / "sealed", 0o700)
    m = shared_mount(store)
    assert stat.S_IMODE(os.stat(m.path("private.key")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(m.path("group.txt")).st_mode) == 0o640
    assert stat.S_IMODE(os.stat(m.path("world.txt")).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(m.path("sealed")).st_mode) == 0o700
    rc, _, err = as_nobody("cat", m.path("private.key"))
    assert rc != 0 and "Permission denied" in err, err
    rc, _, err = as_nobody("cat", m.path("group.txt"))
    assert rc != 0 and "Permission denied" in err, err
    rc, _, err = as_nobody("ls", m.path("sealed"))
    assert rc != 0 and "Permission denied" in err, err
    assert nobody_reads(m.path("sealed/inner.txt")) is None
    assert nobody_reads(m.path("world.txt")) == b"everyone\n"
    # the owner (root here) still reads it
    assert Path(m.path("private.key")).read_bytes() == b"-----BEGIN PRIVATE KEY-----\n"


def make_link_store(top):
    """A store that nobody can reach directly too (under the 0755 @top), so that what nobody
    reads through the store's own directories can be compared with what the mount gives.

        world.txt 0644     private/ 0700: inner.txt 0644     group/ 0750: g.txt 0644
        dirlink -> private (hidden itself, but a link's target may pass through it)
        hop -> private/inner.txt (a link to a link)
        public/ 0755: the links under test
    """
    store = top / "store"
    for d, mode in [("", 0o755), ("private", 0o700), ("group", 0o750), ("public", 0o755)]:
        (store / d).mkdir(exist_ok=True)
        os.chmod(store / d, mode)
    for rel, data in [("world.txt", b"world\n"), ("private/inner.txt", b"inside 0700\n"),
                      ("group/g.txt", b"group only\n")]:
        (store / rel).write_bytes(data)
        os.chmod(store / rel, 0o644)
    os.symlink("private", store / "dirlink")
    os.symlink("private/inner.txt", store / "hop")
    return store


# link in public/ -> (its target, the mode the mount must show: target 0644 & each
# directory's search bits, the root left out)
LINKS = {
    "link.txt": ("../private/inner.txt", 0o600),   # the case
    "chain.txt": ("../hop", 0o600),                # a link to a link into private/
    "viadir.txt": ("../dirlink/inner.txt", 0o600),  # through a link to the 0700 directory
    "through.txt": ("../private/../world.txt", 0o600),  # ".." out of private/ needs its x
    "grp.txt": ("../group/g.txt", 0o640),          # others lose, the group keeps r
    "ok.txt": ("../world.txt", 0o644),             # nothing private on the way
}


def test_link_no_more_readable_than_through_the_store(shared_mount, tmp_path):
    """Issue 28 point 7: a relative link to a file inside a 0700 directory showed the
    target's mode (0644) and let nobody read what nobody cannot read in the store. A link's
    mode is now its target's ANDed with the search bits of every directory on the resolved
    path: nobody reads through the mount exactly what nobody reads through the store, listed
    or looked up by name, and the mount's owner class keeps the owner's rights."""
    top = Path(tempfile.mkdtemp(prefix="tierfs-links-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        store = make_link_store(top)
        for name, (target, _) in LINKS.items():
            os.symlink(target, store / "public" / name)
        m = shared_mount(store, ["metadata_ttl=3600"])
        assert set(LINKS) <= set(os.listdir(m.path("public")))
        rc, _, err = as_nobody("cat", store / "private" / "inner.txt")
        assert rc != 0 and "Permission denied" in err, err
        wrong = []
        for name, (_, mode) in LINKS.items():
            shown = stat.S_IMODE(os.stat(m.path("public/" + name)).st_mode)
            direct = nobody_reads(store / "public" / name)
            through = nobody_reads(m.path("public/" + name))
            if shown != mode or through != direct:
                wrong.append((name, oct(shown), oct(mode), direct, through))
        assert not wrong, f"(link, mode shown, want, nobody via store, via mount): {wrong}"

        # a link the listing has not seen: looked up by name (the store's stat), same rule
        os.symlink("../private/inner.txt", store / "public" / "late.txt")
        assert nobody_reads(m.path("public/late.txt")) is None
        assert stat.S_IMODE(os.stat(m.path("public/late.txt")).st_mode) == 0o600
        # root, the mount's owner here, still reads every link
        assert Path(m.path("public/link.txt")).read_bytes() == b"inside 0700\n"

        # with nobody as the mount's owner, nobody gets the owner's bits: it reads the link
        m2 = shared_mount(store, [f"uid={NOBODY}"])
        assert nobody_reads(m2.path("public/link.txt")) == b"inside 0700\n"
        assert nobody_reads(m2.path("public/grp.txt")) == b"group only\n"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_link_mode_follows_chmod_of_a_directory_on_its_path(shared_mount, tmp_path):
    """A directory on a link's resolved path made searchable (or private again) in the store
    changes the link's mode once the metadata is refreshed (metadata_ttl=0 here)."""
    top = Path(tempfile.mkdtemp(prefix="tierfs-links-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        store = make_link_store(top)
        os.symlink("../private/inner.txt", store / "public" / "link.txt")
        m = shared_mount(store, ["metadata_ttl=0"])
        link = m.path("public/link.txt")
        assert stat.S_IMODE(os.stat(link).st_mode) == 0o600
        os.chmod(store / "private", 0o711)
        harness.wait_until(lambda: stat.S_IMODE(os.stat(link).st_mode) == 0o644, 10,
                           "the link to show 0644 once private/ is searchable")
        assert nobody_reads(link) == b"inside 0700\n"
        os.chmod(store / "private", 0o700)
        harness.wait_until(lambda: stat.S_IMODE(os.stat(link).st_mode) == 0o600, 10,
                           "the link to show 0600 again")
        assert nobody_reads(link) is None
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_links_out_of_root_stay_hidden_whatever_the_modes(shared_mount, tmp_path):
    """The mode rule changes nothing for links that leave the root or name a directory:
    they stay hidden (ENOENT), a 0700 directory on the way or not."""
    top = Path(tempfile.mkdtemp(prefix="tierfs-links-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        store = make_link_store(top)
        (top / "outside.txt").write_bytes(b"outside\n")
        for name, target in [("up.txt", "../../outside.txt"),
                             ("upvia.txt", "../private/../../outside.txt"),
                             ("abs.txt", str(store / "world.txt")),
                             ("dir", "../private"), ("loop", "loop")]:
            os.symlink(target, store / "public" / name)
        m = shared_mount(store)
        names = set(os.listdir(m.path("public")))
        for name in ["up.txt", "upvia.txt", "abs.txt", "dir", "loop"]:
            assert name not in names, name
            harness.expect_errno(lambda: os.stat(m.path("public/" + name)), errno.ENOENT)
            assert nobody_reads(m.path("public/" + name)) is None
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_mode_follows_chmod_in_store(shared_mount, tmp_path):
    """A file made private in the store is private in the mount once the metadata is
    refreshed (metadata_ttl=0 here)."""
    store = tmp_path / "store"
    store.mkdir()
    (store / "f.txt").write_bytes(b"soon private\n")
    os.chmod(store / "f.txt", 0o644)
    m = shared_mount(store, ["metadata_ttl=0"])
    assert nobody_reads(m.path("f.txt")) == b"soon private\n"
    os.chmod(store / "f.txt", 0o600)
    harness.wait_until(lambda: stat.S_IMODE(os.stat(m.path("f.txt")).st_mode) == 0o600, 10,
                       "the mount to show mode 0600")
    assert nobody_reads(m.path("f.txt")) is None


def test_fifo_in_store_never_hangs(shared_mount, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "ok.txt").write_bytes(b"still fine\n")
    os.mkfifo(store / "pipe")
    os.symlink("pipe", store / "pipelink")
    (store / "later").write_bytes(b"regular at first\n")
    m = shared_mount(store)
    shared_mount.releases.append(release_fifo(store / "pipe"))
    shared_mount.releases.append(release_fifo(store / "later"))
    rc, out, err = as_nobody("ls", "-l", m.path())
    assert rc == 0, err
    assert b"pipe" not in out
    for rel in ["pipe", "pipelink"]:
        rc, _, _ = as_nobody("cat", m.path(rel))
        assert rc != 0
    # a file listed as regular and replaced by a FIFO before it is read: the reader gets an
    # error at once, and the I/O thread is not stuck in open()
    assert os.stat(m.path("later")).st_size == len(b"regular at first\n")
    os.unlink(store / "later")
    os.mkfifo(store / "later")
    rc, out, _ = as_nobody("cat", m.path("later"))
    assert rc != 0 and out == b""
    rc, out, _ = as_nobody("cat", m.path("ok.txt"))
    assert rc == 0 and out == b"still fine\n"
    rc, out, err = as_nobody("ls", "-lR", m.path())
    assert rc == 0, err


def test_uid_gid_modes_show_and_are_enforced(shared_mount, tmp_path):
    store = tmp_path / "store"
    (store / "sub").mkdir(parents=True)
    (store / "a.txt").write_bytes(b"aaa\n")
    (store / "sub" / "b.txt").write_bytes(b"bbb\n")
    for p in [store / "a.txt", store / "sub" / "b.txt"]:
        os.chmod(p, 0o644)
    os.chmod(store / "sub", 0o755)

    m = shared_mount(store, ["uid=1234", "gid=2345", "file_mode=0640", "dir_mode=0750"])
    for rel, kind, mode in [("", stat.S_IFDIR, 0o750), ("sub", stat.S_IFDIR, 0o750),
                            ("a.txt", stat.S_IFREG, 0o640),
                            ("sub/b.txt", stat.S_IFREG, 0o640)]:
        st = os.stat(m.path(rel))
        assert (st.st_uid, st.st_gid) == (1234, 2345), rel
        assert stat.S_IFMT(st.st_mode) == kind and stat.S_IMODE(st.st_mode) == mode, \
            (rel, oct(st.st_mode))
    rc, _, err = as_nobody("ls", m.path())
    assert rc != 0 and "Permission denied" in err, err

    # file_mode=0600: nobody is "other", and gets nothing
    m2 = shared_mount(store, ["file_mode=0600"])
    assert stat.S_IMODE(os.stat(m2.path("a.txt")).st_mode) == 0o600
    rc, _, err = as_nobody("cat", m2.path("a.txt"))
    assert rc != 0 and "Permission denied" in err, err
    assert Path(m2.path("a.txt")).read_bytes() == b"aaa\n"  # root may

    # owner and group classes, checked by the kernel: nobody as owner, then as group
    m3 = shared_mount(store, [f"uid={NOBODY}", "file_mode=0400", "dir_mode=0500"])
    assert nobody_reads(m3.path("sub/b.txt")) == b"bbb\n"
    m4 = shared_mount(store, [f"gid={NOBODY}", "file_mode=0040", "dir_mode=0050"])
    assert nobody_reads(m4.path("sub/b.txt")) == b"bbb\n"
    m5 = shared_mount(store, ["file_mode=0604", "dir_mode=0700"])
    rc, _, err = as_nobody("cat", m5.path("a.txt"))
    assert rc != 0 and "Permission denied" in err, err  # the directory is 0700


def test_default_modes_and_control_files(shared_mount, tmp_path):
    store = tmp_path / "store"
    (store / "d").mkdir(parents=True)
    (store / "f").write_bytes(b"x")
    os.chmod(store / "f", 0o666)
    os.chmod(store / "d", 0o777)
    m = shared_mount(store)
    root = os.stat(m.path())
    assert (root.st_uid, root.st_gid) == (os.getuid(), os.getgid())
    assert stat.S_IMODE(root.st_mode) == 0o755
    assert stat.S_IMODE(os.stat(m.path("f")).st_mode) == 0o644  # never wider than file_mode
    assert stat.S_IMODE(os.stat(m.path("d")).st_mode) == 0o755
    with open("/proc/self/mountinfo") as f:
        line = next(x for x in f if f" {m.mnt} " in x)
    assert "default_permissions" in line, line
    # the control surface holds no secrets: everyone may read it
    rc, out, err = as_nobody("cat", m.path(".tierfs/stats"), m.path(".tierfs/config"))
    assert rc == 0, err
    assert b"file_mode=0644" in out and b"dir_mode=0755" in out
    # a write is refused whatever the mode says
    harness.expect_errno(lambda: open(m.path("f"), "r+b"), errno.EROFS, errno.EACCES)


@pytest.mark.parametrize("opt,msg", [
    ("file_mode=999", "file_mode=999: not an octal mode"),
    ("uid=abc", "uid=abc: not a whole number"),
    ("gid=-5", "gid=-5: not a whole number"),
    ("dir_mode=4755", "dir_mode=4755: must be at most 0777"),
    ("uid=4294967295", "uid=4294967295: must be at most 4294967294"),
])
def test_bad_values_refused_with_one_line(fuse, tmp_path, opt, msg):
    store = tmp_path / "store"
    store.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    harness.Mount.registry.append(str(mnt))
    rc, out, err = harness.run_tierfs(["file://" + str(store), str(mnt), "-o", opt])
    assert rc != 0
    assert not harness.mounted(mnt)
    assert len(err) == 1 and err[0].startswith("tierfs: " + msg), err


def test_default_permissions_keeps_others_from_steering(shared_mount, tmp_path):
    """default_permissions is always on: the kernel asks for write permission on the root
    before a user.* setxattr, and dir_mode 0755 gives it to the owner only. (A mount without
    allow_write is read-only to the kernel, which refuses every setxattr with EROFS before
    asking; `tierfs set` steers those.)"""
    store = tmp_path / "store"
    store.mkdir()
    m = shared_mount(store, ["allow_write"])
    before = os.getxattr(m.path(), "user.tierfs.lagging_rate")
    rc, _, err = as_nobody("setfattr", "-n", "user.tierfs.lagging_rate", "-v", "0", m.path())
    assert rc != 0 and "Permission denied" in err, err
    assert os.getxattr(m.path(), "user.tierfs.lagging_rate") == before
    os.setxattr(m.path(), "user.tierfs.lagging_rate", b"10M")  # the owner may
    assert os.getxattr(m.path(), "user.tierfs.lagging_rate") == b"10M"
