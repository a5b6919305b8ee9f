"""Writes as shells and POSIX programs expect them (issue 36; docs/semantics.md, "Who commits a
file" and "POSIX answers"), on a file:// mount and an S3 (s3rver) mount.

A file is committed at its writer's last close: the process that opened it, holding no other
descriptor of it. A forked child closing its inherited copy (a shell's command, subprocess,
make's recipes) commits nothing, so the store gets exactly what was written, when the writer's
close returns and not before. Then the errnos of create, open, unlink, mkdir, rmdir, truncate
and utimensat, the way a POSIX test suite (pjdfstest) asks them.
"""

import errno
import mmap
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

import harness
import lagging_util as lu
from fakes3 import MIB, FakeS3, faults

WD = ["allow_write", "allow_delete", "allow_overwrite"]


class Store:
    """A writable mount (m) and a look at its store from outside the mount."""

    def __init__(self, kind, mount, tmp_path, s3, opts=(), name=None):
        self.kind = kind
        if kind == "file":
            self.root = tmp_path / ("store-" + (name or "0"))
            self.root.mkdir()
            self.m = mount("file://" + str(self.root), ["block_size=1M", *WD, *opts], name=name)
        else:
            self.prefix = "posix-" + uuid.uuid4().hex[:12]
            self.cli = s3.client()
            self.m = mount(f"s3://{harness.BUCKET}/{self.prefix}",
                           [f"endpoint={s3.endpoint}", "path_style", "block_size=1M",
                            "part_size=5M", *WD, *opts], env=harness.S3_ENV, name=name)

    def get(self, key):
        """The object's bytes in the store, None if it has none."""
        if self.kind == "file":
            p = self.root / key
            return p.read_bytes() if p.is_file() else None
        try:
            o = self.cli.get_object(Bucket=harness.BUCKET, Key=f"{self.prefix}/{key}")
        except self.cli.exceptions.NoSuchKey:
            return None
        return o["Body"].read()

    def path(self, key):
        return self.m.path(key)

    def clean(self):
        """Delete what the test left in the shared bucket under its prefix (other tests list
        the whole bucket)."""
        if self.kind == "file":
            return
        pages = self.cli.get_paginator("list_objects_v2").paginate(
            Bucket=harness.BUCKET, Prefix=self.prefix + "/")
        for page in pages:
            for o in page.get("Contents", []):
                self.cli.delete_object(Bucket=harness.BUCKET, Key=o["Key"])


@pytest.fixture(params=["file", "s3"])
def st(request, mount, tmp_path):
    s3 = request.getfixturevalue("s3") if request.param == "s3" else None
    store = Store(request.param, mount, tmp_path, s3)
    yield store
    store.clean()


def sh(script, **kw):
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, **kw)
    assert p.returncode == 0 and not p.stderr, (script, p.returncode, p.stderr)
    return p


# ---------------------------------------------------------------------------------------------
# who commits: the writer's last close


def test_a_childs_close_does_not_commit_the_shells_file(st):
    """The issue's case: `{ echo one; /bin/true; echo two; } > f`. The shell opens f, and the
    child /bin/true inherits it; the child's exit closed its copy, which committed "one", and
    the shell's next write was EINVAL ("echo: write error")."""
    sh(f"{{ echo one; /bin/true; echo two; }} > {st.path('f')}")
    assert st.get("f") == b"one\ntwo\n"
    sh(f"for i in 1 2 3; do echo $i; /bin/true; done >> {st.path('loop')}")
    assert st.get("loop") == b"1\n2\n3\n"


def test_a_shells_dup_patterns_commit_at_the_last_close(st):
    """`exec 3>f; echo a >&3; cmd >&3; exec 3>&-`: the shell's own `>&3` for a builtin closes
    a dup of the file (fd 1) while fd 3 holds it: no commit there; a child's copy neither; the
    object is committed by `exec 3>&-`, with everything."""
    p = st.path("g")
    sh(f"exec 3>{p}; echo a >&3; sh -c 'echo b' >&3; echo c >&3; exec 3>&-")
    assert st.get("g") == b"a\nb\nc\n"


def test_make_recipes_write_through_the_makes_stdout(st, tmp_path):
    """`make > f`: make and its recipe shells inherit the file; their exits commit nothing;
    make's exit (the opener, after exec) commits their output whole."""
    mk = tmp_path / "mk"
    mk.write_text("all: one two\none:\n\t@echo one; true\ntwo:\n\t@echo two; sh -c 'echo three'\n")
    subprocess.run(["bash", "-c", f"make -s -f {mk} > {st.path('make.out')}"], check=True,
                   timeout=60, cwd=tmp_path)
    assert st.get("make.out") == b"one\ntwo\nthree\n"


def test_a_python_writer_forking_while_it_writes(st):
    """A Python parent writes while children run: subprocess with close_fds (the child closes
    the inherited descriptor itself), one holding it (pass_fds) until its exit, os.fork with
    os._exit. The store has nothing under the name until the parent's close, then exactly
    the parent's bytes."""
    chunks = [os.urandom(100000) for _ in range(4)]
    fd = os.open(st.path("py.bin"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, chunks[0])
        subprocess.run(["true"], check=True, timeout=30)  # close_fds: closed in the child
        assert st.get("py.bin") is None
        os.write(fd, chunks[1])
        subprocess.run(["sh", "-c", "exit 0"], pass_fds=(fd,), check=True, timeout=30)
        assert st.get("py.bin") is None
        os.write(fd, chunks[2])
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        assert st.get("py.bin") is None
        os.write(fd, chunks[3])
        assert st.get("py.bin") is None
    finally:
        os.close(fd)
    assert st.get("py.bin") == b"".join(chunks)  # close() returned: the store has it


def test_a_child_writing_through_the_inherited_descriptor(st):
    """The writer forks after opening and the child writes too (at the shared offset): its
    exit commits nothing, the parent's later writes go on, and the parent's close commits all
    of it in order."""
    fd = os.open(st.path("both"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"parent1\n")
        pid = os.fork()
        if pid == 0:
            os.write(fd, b"child\n")
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        os.write(fd, b"parent2\n")
    finally:
        os.close(fd)
    assert st.get("both") == b"parent1\nchild\nparent2\n"


def test_the_writers_close_commits_while_a_child_still_holds_it(st):
    """A child that keeps the descriptor (a background process) does not hold the commit
    back: the writer's close returns once the store has its bytes."""
    fd = os.open(st.path("bg"), os.O_WRONLY | os.O_CREAT, 0o644)
    child = subprocess.Popen(["sleep", "60"], pass_fds=(fd,))
    try:
        os.write(fd, b"x" * 70000)
        os.close(fd)
        assert st.get("bg") == b"x" * 70000
    finally:
        child.kill()
        child.wait()


def test_a_popen_child_writes_a_file_its_parent_closed_unwritten(st):
    """subprocess.Popen(cmd, stdout=open(f, "w")): the parent's file object is closed while
    the child writes. The parent wrote nothing and its child holds the file: the commit waits
    for the last close (release), and has all the child's bytes."""
    f = open(st.path("popen.out"), "w")
    p = subprocess.Popen(["sh", "-c", "echo hi; read x; echo there"], stdout=f,
                         stdin=subprocess.PIPE)
    # the child wrote before the parent's close (the case that committed "hi" alone)
    harness.wait_until(lambda: os.stat(st.path("popen.out")).st_size == 3, 10, "hi")
    f.close()
    p.stdin.close()
    assert p.wait(timeout=30) == 0
    harness.wait_until(lambda: st.get("popen.out") is not None, 10, "the child's output")
    assert st.get("popen.out") == b"hi\nthere\n"


def test_a_shell_writes_through_a_bind_mount_of_a_directory(st, tmp_path):
    """A directory of the mount bound elsewhere (a container's volume, a Kubernetes subPath):
    the shell's `>` (open, dup2 onto 1, close) and `exec 3>` patterns commit whole at the last
    close. The descriptors' paths are the bind mount's, not the mount's: matched by the whole
    path, the dup went unseen, an empty object was committed, and the write was EINVAL."""
    os.mkdir(st.path("vol"))
    bind = tmp_path / "bind"
    bind.mkdir()
    subprocess.run(["mount", "--bind", st.path("vol"), str(bind)], check=True)
    try:
        sh(f"echo hi > {bind}/b; {{ echo one; /bin/true; echo two; }} > {bind}/c")
        sh(f"exec 3>{bind}/d; echo a >&3; sh -c 'echo b' >&3; exec 3>&-")
    finally:
        subprocess.run(["umount", str(bind)], check=True)
    assert (st.get("vol/b"), st.get("vol/c"), st.get("vol/d")) == (
        b"hi\n", b"one\ntwo\n", b"a\nb\n")


def test_a_process_with_thousands_of_descriptors_hands_a_file_to_a_child(st):
    """A broker-sized process (5000 descriptors open, past what tierfs reads) opens a file,
    hands it to a child's stdout and closes its own copy before the child writes (Java's
    ProcessBuilder.redirectOutput, Popen(stdout=open(...))): nothing is committed at that
    close, and the child's output arrives whole (an empty object was committed there, and
    the child's write failed)."""
    code = f"""
import os, resource, subprocess, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
held = [os.open("/dev/null", os.O_RDONLY) for _ in range(5000)]
with open({st.path('big.out')!r}, "w") as f:
    p = subprocess.Popen(["sh", "-c", "read x; echo x"], stdout=f, stdin=subprocess.PIPE)
p.stdin.close()
sys.exit(p.wait())
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    harness.wait_until(lambda: st.get("big.out") is not None, 10, "the child's output")
    assert st.get("big.out") == b"x\n"


def test_another_thread_of_the_writer_closes(st):
    """A writer opens on one thread and closes on another (a Java broker): the close is the
    writer's, so it commits and returns when the store has the object."""
    box = {}
    t = threading.Thread(target=lambda: box.update(fd=os.open(
        st.path("thr"), os.O_WRONLY | os.O_CREAT, 0o644)))
    t.start()
    t.join()
    os.write(box["fd"], b"threads")
    t = threading.Thread(target=os.close, args=(box["fd"],))
    t.start()
    t.join()
    assert st.get("thr") == b"threads"


def test_writes_after_the_commit_are_refused(st):
    """Once the writer's close committed the object, a child still holding the descriptor
    cannot add to it: EINVAL (docs/semantics.md), and the object stays what the writer
    wrote."""
    fd = os.open(st.path("after"), os.O_WRONLY | os.O_CREAT, 0o644)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)  # the parent closed
        try:
            os.write(fd, b"late")
            os._exit(0)
        except OSError as e:
            os._exit(e.errno)
    os.close(r)
    os.write(fd, b"early")
    os.close(fd)
    assert st.get("after") == b"early"
    os.write(w, b"x")
    os.close(w)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == errno.EINVAL
    assert st.get("after") == b"early"


# ---------------------------------------------------------------------------------------------
# empty files, O_CREAT|O_RDONLY


def test_an_empty_file_is_committed_by_its_close(st):
    """open(O_CREAT|O_WRONLY), close: the object is in the store when close returns, and it
    opens for reading at once (was EBUSY until the release reached the store, and utime
    succeeded as if it were still written)."""
    os.close(os.open(st.path("e"), os.O_CREAT | os.O_WRONLY, 0o644))
    assert st.get("e") == b""
    os.close(os.open(st.path("e"), os.O_RDONLY))
    with pytest.raises(OSError) as e:
        os.utime(st.path("e"), (1, 1))
    assert e.value.errno == errno.EPERM  # a closed object's times are the store's


def test_o_creat_o_rdonly_makes_an_empty_file(st):
    """open(O_CREAT|O_RDONLY) of a new name creates it (was EPERM): an empty object, committed
    at the close, read as empty through the descriptor."""
    fd = os.open(st.path("ro"), os.O_CREAT | os.O_RDONLY, 0o644)
    try:
        assert os.read(fd, 10) == b""
        assert os.fstat(fd).st_size == 0
    finally:
        os.close(fd)
    assert st.get("ro") == b""
    fd = os.open(st.path("ro"), os.O_CREAT | os.O_RDONLY)  # exists: opened, not created
    os.close(fd)


# ---------------------------------------------------------------------------------------------
# POSIX answers (pjdfstest's cases, where the design allows the operation)


def errno_of(f):
    try:
        f()
    except OSError as e:
        return errno.errorcode[e.errno]
    return "ok"


def test_names_longer_than_255_bytes_are_enametoolong(st):
    """statfs says namelen 255: a 256-byte name is ENAMETOOLONG for stat, create, mkdir,
    unlink, rmdir and rename (S3's rmdir said ENOENT); 255 bytes are a name like any."""
    long_, ok = "x" * 256, "y" * 255
    assert os.statvfs(st.m.mnt).f_namemax == 255
    open(st.path("src"), "wb").close()
    got = {
        "stat": errno_of(lambda: os.stat(st.path(long_))),
        "create": errno_of(lambda: os.open(st.path(long_), os.O_CREAT | os.O_WRONLY, 0o644)),
        "mkdir": errno_of(lambda: os.mkdir(st.path(long_))),
        "unlink": errno_of(lambda: os.unlink(st.path(long_))),
        "rmdir": errno_of(lambda: os.rmdir(st.path(long_))),
        "rename": errno_of(lambda: os.rename(st.path("src"), st.path(long_))),
    }
    assert got == dict.fromkeys(got, "ENAMETOOLONG")
    if st.kind == "file":  # the temporary name beside it must fit too (s3rver keeps keys
        # as file names with a suffix of its own: 255 bytes do not fit its disk)
        with open(st.path(ok), "wb") as f:
            f.write(b"ok")
        assert st.get(ok) == b"ok"
        os.unlink(st.path(ok))
        os.mkdir(st.path(ok))
        os.rmdir(st.path(ok))


def test_errnos_of_create_open_unlink_mkdir_rmdir(st):
    """The error cases of a POSIX suite, each answered as POSIX says."""
    os.mkdir(st.path("d"))
    with open(st.path("d/a"), "wb") as f:
        f.write(b"a")
    got = {
        "O_EXCL on an existing file": errno_of(
            lambda: os.open(st.path("d/a"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)),
        "mkdir of an existing dir": errno_of(lambda: os.mkdir(st.path("d"))),
        "mkdir of an existing file": errno_of(lambda: os.mkdir(st.path("d/a"))),
        "rmdir of a non-empty dir": errno_of(lambda: os.rmdir(st.path("d"))),
        "rmdir of a missing name": errno_of(lambda: os.rmdir(st.path("nope"))),
        "rmdir of a file": errno_of(lambda: os.rmdir(st.path("d/a"))),
        "unlink of a missing name": errno_of(lambda: os.unlink(st.path("nope"))),
        "unlink of a dir": errno_of(lambda: os.unlink(st.path("d"))),
        "open of a dir for writing": errno_of(lambda: os.open(st.path("d"), os.O_WRONLY)),
        "create under a file": errno_of(
            lambda: os.open(st.path("d/a/x"), os.O_CREAT | os.O_WRONLY)),
        "mkdir under a file": errno_of(lambda: os.mkdir(st.path("d/a/x"))),
        "unlink under a file": errno_of(lambda: os.unlink(st.path("d/a/x"))),
        "create in a missing dir": errno_of(
            lambda: os.open(st.path("no/x"), os.O_CREAT | os.O_WRONLY)),
        "symlink": errno_of(lambda: os.symlink("a", st.path("d/l"))),
        "link": errno_of(lambda: os.link(st.path("d/a"), st.path("d/l"))),
        "mkfifo": errno_of(lambda: os.mkfifo(st.path("d/p"))),
        "chmod": errno_of(lambda: os.chmod(st.path("d/a"), 0o600)),
        "chown": errno_of(lambda: os.chown(st.path("d/a"), 1, 1)),
        "ELOOP: O_NOFOLLOW of a file": errno_of(
            lambda: os.close(os.open(st.path("d/a"), os.O_RDONLY | os.O_NOFOLLOW))),
    }
    assert got == {
        "O_EXCL on an existing file": "EEXIST",
        "mkdir of an existing dir": "EEXIST",
        "mkdir of an existing file": "EEXIST",
        "rmdir of a non-empty dir": "ENOTEMPTY",
        "rmdir of a missing name": "ENOENT",
        "rmdir of a file": "ENOTDIR",
        "unlink of a missing name": "ENOENT",
        "unlink of a dir": "EISDIR",
        "open of a dir for writing": "EISDIR",
        "create under a file": "ENOTDIR",
        "mkdir under a file": "ENOTDIR",
        "unlink under a file": "ENOTDIR",
        "create in a missing dir": "ENOENT",
        "symlink": "EPERM",  # by design: no links, no special files, the mount's modes
        "link": "EPERM",
        "mkfifo": "EPERM",
        "chmod": "EPERM",
        "chown": "EPERM",
        "ELOOP: O_NOFOLLOW of a file": "ok",  # no symlink can exist, so no ELOOP
    }
    assert os.stat(st.path("d/a")).st_nlink == 1
    assert os.stat(st.path("d")).st_nlink == 2


def test_a_file_open_when_unlinked_reads_enoent(st):
    """pjdfstest unlink/14's case: a file open for reading, then unlinked through the mount.
    Its bytes go with it: unlink removes the object from the store at once and drops its
    blocks from the tiers, so a read then is ENOENT (docs/semantics.md, by design: no deferred
    delete). fstat still says st_nlink 1, where POSIX says 0 (docs/semantics.md)."""
    data = os.urandom(300 * 1024)
    with open(st.path("u"), "wb") as f:
        f.write(data)
    # O_DIRECT: the read reaches tierfs, whatever the kernel kept of the written pages
    fd = os.open(st.path("u"), os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 64 * 1024)  # page-aligned, as O_DIRECT needs
    try:
        assert os.preadv(fd, [buf], 0) == len(buf)  # a twin: it reads before the unlink
        assert buf[:] == data[:len(buf)]
        os.unlink(st.path("u"))
        assert errno_of(lambda: os.preadv(fd, [buf], 64 * 1024)) == "ENOENT"
        assert os.fstat(fd).st_nlink == 1
    finally:
        os.close(fd)
    assert st.get("u") is None
    assert errno_of(lambda: os.stat(st.path("u"))) == "ENOENT"


def test_the_parents_times_after_create_and_unlink(st):
    """create and unlink change their directory's mtime and ctime (the kernel asks for the
    directory's attributes again after each: they were the mount's start time forever), to the
    nanosecond: two changes in one second are two times (a CI run saw a create in the second
    after the mount's start keep the start's time: time(2) still showed the last second)."""
    os.mkdir(st.path("p"))
    s0 = os.stat(st.path("p"))
    fd = os.open(st.path("p/f"), os.O_CREAT | os.O_WRONLY, 0o644)
    sf = os.fstat(fd)
    os.close(fd)
    s1 = os.stat(st.path("p"))
    assert s1.st_mtime_ns > s0.st_mtime_ns and s1.st_ctime_ns > s0.st_ctime_ns
    assert sf.st_mtime_ns > s0.st_mtime_ns  # the new file's own time too
    os.unlink(st.path("p/f"))
    s2 = os.stat(st.path("p"))
    assert s2.st_mtime_ns > s1.st_mtime_ns and s2.st_ctime_ns > s1.st_ctime_ns
    assert s2.st_mtime_ns <= time.time_ns()


def test_truncate_and_times(st):
    """O_TRUNC of an empty (or any) object replaces it (allow_overwrite); truncate(2) and
    utimensat of a closed object are EPERM (the store changes nothing in place, and keeps no
    times a client sets); on a file being written, times and a size of 0 are accepted."""
    open(st.path("t"), "wb").close()
    os.close(os.open(st.path("t"), os.O_WRONLY | os.O_TRUNC))
    assert st.get("t") == b""
    assert errno_of(lambda: os.truncate(st.path("t"), 0)) == "EPERM"
    assert errno_of(lambda: os.truncate(st.path("t"), 5)) == "EPERM"
    assert errno_of(lambda: os.utime(st.path("t"))) == "EPERM"
    fd = os.open(st.path("w"), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.utime(st.path("w"), (1, 1))
        os.ftruncate(fd, 0)
        os.write(fd, b"w")
    finally:
        os.close(fd)
    assert st.get("w") == b"w"


def test_what_cannot_grow_a_file_in_place_says_so(st, tmp_path):
    """Ways to size or fill a file other than writing it in order: ftruncate to a larger size
    of a file being written is EPERM; fallocate is EOPNOTSUPP (util-linux `fallocate` says
    'Operation not supported'; glibc's posix_fallocate would then write zeros in place, which
    is refused too); copy_file_range into the mount is EXDEV, so cp and Java fall back to
    read and write; a writable shared mapping needs the size the file cannot grow to. None of
    them leaves a byte of its own in the store: the object is what was written in order."""
    fd = os.open(st.path("g"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        assert errno_of(lambda: os.ftruncate(fd, 8192)) == "EPERM"
        with pytest.raises(ValueError):  # mmap of 8 KiB of a file of 0 bytes
            mmap.mmap(fd, 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        os.write(fd, b"grown by write")
    finally:
        os.close(fd)
    assert st.get("g") == b"grown by write"
    p = subprocess.run(["fallocate", "-l", "1M", st.path("f")], capture_output=True, text=True,
                       timeout=30, env=dict(os.environ, LC_ALL="C"))
    assert p.returncode != 0 and "Operation not supported" in p.stderr, p
    assert st.get("f") == b""  # its open(O_CREAT) made it, empty, as POSIX says
    fd = os.open(st.path("p"), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        assert errno_of(lambda: os.posix_fallocate(fd, 0, 1 << 20)) in ("EINVAL", "EBADF",
                                                                           "EOPNOTSUPP")
        os.write(fd, b"after")
    finally:
        os.close(fd)
    assert st.get("p") == b"after"
    src = tmp_path / "src"
    src.write_bytes(os.urandom(3 << 20))
    si = os.open(src, os.O_RDONLY)
    so = os.open(st.path("c"), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        assert errno_of(lambda: os.copy_file_range(si, so, 3 << 20)) == "EXDEV"
    finally:
        os.close(si)
        os.close(so)
    sh(f"cp {src} {st.path('cp')}")
    assert st.get("cp") == src.read_bytes()


def test_what_cp_install_and_sed_set_changes_nothing_and_succeeds(st, tmp_path):
    """An owner and mode set to what they are already succeed, on any file or directory, and a
    POSIX ACL (an extended attribute) is not supported (ENOTSUP, which tools take as "no ACLs
    here"): `sed -i` said "preserving permissions ...: Read-only file system" (EROFS), and
    `chown` to the owner it has, as tar and cp -p do as root, was EPERM. What would change
    something stays EPERM: the store keeps no owners, modes or times."""
    src = tmp_path / "src"
    src.write_bytes(b"one\ntwo\n")
    src.chmod(0o644)
    sh(f"cp {src} {st.path('s')}")
    if st.kind == "file":  # sed -i renames its new file over the old: S3 has no rename (EXDEV)
        sh(f"sed -i s/one/1/ {st.path('s')}")
        assert st.get("s") == b"1\ntwo\n"
    sh(f"install -m 644 {src} {st.path('i')} && cp -p {src} {st.path('p')}")
    assert st.get("i") == st.get("p") == b"one\ntwo\n"
    os.mkdir(st.path("d"))
    for n in ("s", "d"):
        s0 = os.stat(st.path(n))
        os.chown(st.path(n), s0.st_uid, s0.st_gid)
        os.chmod(st.path(n), s0.st_mode & 0o7777)
        assert os.stat(st.path(n)).st_mode == s0.st_mode
        assert errno_of(lambda: os.chmod(st.path(n), 0o600)) == "EPERM"
        assert errno_of(lambda: os.chown(st.path(n), s0.st_uid + 1, -1)) == "EPERM"
        assert errno_of(lambda: os.setxattr(st.path(n), "user.x", b"1")) == "ENOTSUP"
    assert errno_of(lambda: os.utime(st.path("d"), (1, 1))) == "EPERM"


def test_df_shows_room_on_a_writable_mount(st, mount, tmp_path):
    """statfs of a writable mount: a file:// store's own filesystem (its size and free space),
    an object store 1 PiB free (its API tells no capacity). It said 0 free, 100% used, so a
    program checking for room refused to write and a "filesystem almost full" alert fired. A
    read-only mount still says read-only and nothing free."""
    v = os.statvfs(st.path(""))
    assert not v.f_flag & os.ST_RDONLY and v.f_namemax == 255
    if st.kind == "file":
        r = os.statvfs(st.root)
        assert abs(v.f_blocks * v.f_frsize - r.f_blocks * r.f_frsize) <= v.f_frsize
        assert abs(v.f_bavail * v.f_frsize - r.f_bavail * r.f_frsize) <= 1 << 30  # others write
        assert v.f_files == r.f_files
    else:
        assert v.f_bavail * v.f_frsize == v.f_blocks * v.f_frsize == 1 << 50
        assert v.f_ffree > 0
    ro = tmp_path / "ro"
    ro.mkdir()
    m = mount("file://" + str(ro), ["block_size=1M"], name="ro")
    v = os.statvfs(m.mnt)
    assert v.f_flag & os.ST_RDONLY and v.f_bavail == 0 and v.f_blocks > 0


# ---------------------------------------------------------------------------------------------
# metrics that do not cry wolf


def test_new_names_are_not_backend_errors(mount, s3, tmp_path):
    """The HEAD that finds a new name free (404) is the answer asked for: counted in
    backend_absent_total, not in backend_errors_total (an alert on errors fired on every
    write)."""
    st = Store("s3", mount, tmp_path, s3)
    try:
        lu.stats(st.m.mnt)  # the mount answers
        s0 = lu.stats(st.m.mnt)
        for i in range(3):
            with open(st.path(f"n{i}"), "wb") as f:
                f.write(b"n")
        s1 = lu.stats(st.m.mnt)
        assert s1.d(s0, "backend_errors_total") == 0
        assert s1.d(s0, "backend_absent_total") >= 3
        assert [st.get(f"n{i}") for i in range(3)] == [b"n"] * 3
    finally:
        st.clean()


def test_an_upload_retry_says_why(mount):
    """A part the store answers 500 once is sent again, and the log says so with the status
    (9 retries in one run against a healthy store left no line)."""
    fake = FakeS3().start()
    try:
        m = mount(f"s3://{FakeS3.BUCKET}",
                  [f"endpoint={fake.endpoint}", "path_style", "block_size=1M", "part_size=5M",
                   "retries=2", "timeout=5", *WD],
                  env={"AWS_ACCESS_KEY_ID": FakeS3.KEY, "AWS_SECRET_ACCESS_KEY": FakeS3.SECRET},
                  foreground=True)  # its log in m.log
        fake.add_rule("part", faults.status(500), part=2)
        payload = os.urandom(11 * MIB)
        with open(m.path("r.bin"), "wb") as f:
            f.write(payload)
        assert fake.objects["r.bin"].data == payload
        assert lu.stats(m.mnt).v("backend_upload_retries_total") >= 1
        harness.wait_until(lambda: "trying again" in m.log.read_text(errors="replace"), 10,
                           "the retry's log line")
        line = [ln for ln in m.log.read_text(errors="replace").splitlines()
                if "trying again" in ln][0]
        assert "PUT" in line and "HTTP 500" in line and "r.bin" in line, line
    finally:
        fake.stop()
