"""READY=1 reaches systemd whenever the mount comes to answer (issue 35).

A Type=notify unit waits for READY=1 before it starts the units ordered after it (a broker);
a READY=1 that never comes costs TimeoutStartSec and a restart. The ready thread (fs/notify.c)
used to try once: a stat of the mountpoint that did not yet see the mount, or a datagram the
notify socket's queue could not take at that moment (it holds net.unix.max_dgram_qlen
datagrams, 10 by default, and the send does not wait), and READY=1 was never sent, silently.

- The queue full when READY=1 is due (no shim: a listener that does not read yet): tierfs says
  why it waits, sends again, and READY=1 arrives once the queue drains.
- The probe before the mount is in place (wedgeshim.so: stat() of the mountpoint answers with
  the parent's attributes while a file exists): READY=1 waits and comes once it sees the mount.
- The plain twin: 20 mounts in a row each of file:// and http://, foreground, every one with
  READY=1 within a few seconds; and a daemonized mount (no -f), whose READY=1 names its own
  process as MAINPID.
"""

import os
import socket
import time

import harness
import pytest
from test_operating import NotifySocket, wedge_env

OPTS = ["block_size=64K", "hot_size=1M", "lagging_size=1M"]


def answers(mnt):
    """The mountpoint is the mount, and the mount answers (the test's own stat)."""
    return os.stat(mnt).st_dev != os.stat(mnt.parent).st_dev and os.path.isdir(mnt / ".tierfs")


def fill_queue(path):
    """Send datagrams to the socket at @path until its queue takes no more; return how many."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.setblocking(False)
    n = 0
    try:
        while n < 100000:
            try:
                s.sendto(b"X_FILLER=1", str(path))
            except BlockingIOError:
                return n
            n += 1
    finally:
        s.close()
    raise AssertionError("the notify socket's queue never filled")


def drain(sock):
    """Read every datagram waiting on @sock; return those that are not fillers."""
    sock.setblocking(False)
    got = []
    while True:
        try:
            d = sock.recv(4096).decode()
        except BlockingIOError:
            return got
        if d != "X_FILLER=1":
            got.append(d)


def log_has(m, text):
    return m.log.exists() and text in m.log.read_text(errors="replace")


def test_ready_survives_a_full_notify_queue(mount, corpus64k, tmp_path):
    """The notify socket's queue is full when the mount comes to answer: READY=1 is sent again
    until it is taken (the old thread tried once and dropped it, silently)."""
    path = tmp_path / "notify"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(path))
    try:
        assert fill_queue(path) > 0
        m = mount(corpus64k.url, OPTS, env={"NOTIFY_SOCKET": str(path)}, foreground=True,
                  name="mnt-full")
        harness.wait_until(lambda: answers(m.mnt), 10, "the mount to answer")
        harness.wait_until(lambda: log_has(m, "does not take READY=1 yet"), 10,
                           "tierfs to say that READY=1 waits for the queue")
        got = drain(listener)  # systemd catches up
        deadline = time.monotonic() + 10
        while not any("READY=1" in d.split("\n") for d in got):
            assert time.monotonic() < deadline, f"no READY=1 after the queue drained: {got}"
            listener.settimeout(0.2)
            try:
                got.append(listener.recv(4096).decode())
            except socket.timeout:
                pass
        ready = next(d for d in got if "READY=1" in d.split("\n"))
        assert any(ln.startswith("STATUS=") and corpus64k.url in ln for ln in ready.split("\n"))
        harness.wait_until(lambda: log_has(m, "READY=1 sent after"), 5, "the log of the send")
    finally:
        listener.close()


def test_ready_waits_for_a_mountpoint_not_yet_the_mount(mount, corpus64k, tmp_path):
    """The ready probe sees the parent's directory at first (as a stat before the mount was in
    place does: wedgeshim.so lies while a file exists). READY=1 must wait and come once the
    probe sees the mount; the old thread gave up at the first look."""
    mnt = tmp_path / "mnt-early"
    early = tmp_path / "early"
    early.write_text("")
    ns = NotifySocket(tmp_path / "notify")
    try:
        env = dict(wedge_env(tmp_path), NOTIFY_SOCKET=ns.path, TIERFS_EARLY_CTL=str(early),
                   TIERFS_EARLY_PATH=str(mnt))
        m = mount(corpus64k.url, OPTS, env=env, foreground=True, name="mnt-early")
        harness.wait_until(lambda: answers(mnt), 10, "the mount to answer")
        harness.wait_until(lambda: log_has(m, "is not the mount yet"), 10,
                           "tierfs to say that READY=1 waits for the mount")
        assert "READY=1" not in ns.lines(), "READY=1 while the probe saw the parent"
        early.unlink()
        harness.wait_until(lambda: "READY=1" in ns.lines(), 10, "READY=1 once the probe sees "
                           "the mount")
        assert ns.lines().count("READY=1") == 1
    finally:
        if early.exists():
            early.unlink()
        ns.close()


def mount_and_await_ready(tmp_path, url, i, foreground=True):
    """Mount @url on a fresh mountpoint with a fresh notify socket; return (seconds until
    READY=1 or None, the messages, the mount's pids)."""
    ns = NotifySocket(tmp_path / f"notify{i}")
    m = harness.Mount(url, tmp_path / f"mnt{i}", OPTS, env={"NOTIFY_SOCKET": ns.path},
                      foreground=foreground, logdir=tmp_path)
    t0 = time.monotonic()
    try:
        m.start()
        try:
            harness.wait_until(lambda: "READY=1" in ns.lines(), 10, "READY=1")
            took = next(t for t, d in ns.msgs if "READY=1" in d.split("\n")) - t0
        except TimeoutError:
            took = None
        return took, list(ns.msgs), list(m.pids)
    finally:
        problem = m.unmount()
        ns.close()
        assert problem is None, problem


@pytest.mark.watchdog(600)
@pytest.mark.parametrize("store", ["file", "http"])
def test_twenty_mounts_in_a_row_each_say_ready(fuse, corpus64k, nginx, tmp_path, store):
    """No shim: 20 plain foreground mounts in a row, each with READY=1 within 10 s."""
    url = corpus64k.url if store == "file" else nginx.url
    missing, times = [], []
    for i in range(20):
        took, msgs, _ = mount_and_await_ready(tmp_path, url, i)
        if took is None:
            missing.append((i, msgs))
        else:
            times.append(took)
    assert not missing, f"{len(missing)} of 20 mounts sent no READY=1: {missing[:3]}"
    assert len(times) == 20


def test_daemonized_mount_says_ready_with_its_pid(fuse, corpus64k, tmp_path):
    """Without -f the daemon (the forked child) sends READY=1, and names itself MAINPID."""
    took, msgs, pids = mount_and_await_ready(tmp_path, corpus64k.url, 0, foreground=False)
    assert took is not None, f"no READY=1 from a daemonized mount: {msgs}"
    ready = next(d for _, d in msgs if "READY=1" in d.split("\n")).split("\n")
    mainpid = [ln for ln in ready if ln.startswith("MAINPID=")]
    assert mainpid and int(mainpid[0].split("=")[1]) in pids, (ready, pids)
