"""A throwaway single-node Ceph cluster with a RADOS Gateway, for the tests (and scripts/soak).

    rgw = Rgw(workdir)      # every file it makes goes under workdir/rgw (created here)
    rgw.start()             # about 15-20 s; RuntimeError("one line") if it cannot start
    rgw.endpoint, rgw.access_key, rgw.secret_key
    rgw.make_bucket("b")
    rgw.kill(); rgw.restart()   # radosgw alone: SIGKILL, then again on the same port
    rgw.stop()              # every daemon it started; removes the files it made; idempotent

The cluster is one ceph-mon, one ceph-osd (bluestore on a sparse file: memstore keeps deleted
objects for two hours and grew to 5.5 GB in one run) and one radosgw with the beast frontend on
127.0.0.1, with no ceph-mgr and no cephx between the daemons (`auth_*_required = none`, so
radosgw needs `ms mon client mode = crc`). Every command gets `-c DIR/ceph.conf` and every
path in that file lies under DIR: nothing is read from or written to /etc/ceph or /var/lib/ceph.
The daemons run in the foreground (-f) as our children, each in its own session, so stop()
ends exactly the processes it started, by pid.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

PACKAGES = "ceph-mon ceph-osd radosgw ceph-common"
BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "ceph", "radosgw-admin", "monmaptool")

CONF = """\
[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
ms bind ipv4 = true
ms bind ipv6 = false
public addr = 127.0.0.1
public network = 127.0.0.0/8
run dir = {d}/run
admin socket = {d}/run/$name.asok
pid file = {d}/run/$name.pid
log file = {d}/log/$name.log
keyring = {d}/keyring
crash dir = {d}/crash
exec dir = {d}/run
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
mon osd full ratio = 0.99
mon osd backfillfull ratio = 0.99
mon osd nearfull ratio = 0.99
osd max object name len = 460
osd max object namespace len = 64
debug ms = 0
[mon.a]
mon data = {d}/mon
[osd.0]
osd data = {d}/osd
osd objectstore = bluestore
bluestore block path = {d}/osd-block
bluestore block create = true
bluestore block size = {block_size}
bluestore block db create = false
bluestore block wal create = false
bluestore fsck on mount = false
bluestore cache size = 67108864
osd memory target = 536870912
osd op num shards = 1
osd op num threads per shard = 2
osd check max object name len on startup = false
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port} tcp_nodelay=1
rgw data = {d}/rgw
rgw enable usage log = false
rgw thread pool size = 64
rgw gc obj min wait = 60
rgw lc debug interval = 10
"""


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def missing():
    """None if the Ceph programs are installed, else a one-line reason."""
    gone = [b for b in BINARIES if not shutil.which(b)]
    if gone:
        return (f"Ceph RGW is not installed ({', '.join(gone)} missing): scripts/bootstrap "
                f"installs {PACKAGES}")
    return None


class Rgw:
    """One throwaway Ceph cluster serving S3 on 127.0.0.1 (see the module's docstring)."""

    USER = "tierfs-test"

    def __init__(self, workdir):
        self.dir = Path(workdir) / "rgw"
        self.port = None
        self.mon_port = None
        self.endpoint = None
        self.access_key = "TIERFSRGWTEST0000001"
        self.secret_key = "tierfs-rgw-test-secret-" + uuid.uuid4().hex
        self.procs = {}  # name -> Popen, the daemons running now
        self.started = []  # the pid of every daemon started, for leftover()
        self._made_dir = False
        self.starts = 0  # radosgw starts, for restart()
        self.crashed_starts = 0  # radosgw starts that died of a signal and were tried again

    # -- running commands ------------------------------------------------------------------

    @property
    def conf(self):
        return self.dir / "ceph.conf"

    def _env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("CEPH_") and k not in ("http_proxy", "https_proxy",
                                                          "HTTP_PROXY", "HTTPS_PROXY")}
        return env

    def _cmd(self, *args, timeout=60, check=True):
        """Run a Ceph tool with our conf; return its stdout. RuntimeError (one line) if it
        fails and @check."""
        argv = [args[0], "-c", str(self.conf), *args[1:]]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                               stdin=subprocess.DEVNULL, env=self._env(), cwd=self.dir)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{' '.join(args[:3])} did not finish in {timeout} s")
        if check and p.returncode != 0:
            last = (p.stderr.strip() or p.stdout.strip()).splitlines()
            raise RuntimeError(f"{' '.join(args[:3])} failed ({p.returncode}): "
                               f"{last[-1] if last else 'no output'}")
        return p.stdout

    def _daemon(self, name, *args):
        out = open(self.dir / "log" / f"{name}.out", "ab")
        try:
            p = subprocess.Popen([args[0], "-c", str(self.conf), *args[1:], "-f"],
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                 env=self._env(), cwd=self.dir, start_new_session=True)
        finally:
            out.close()
        self.procs[name] = p
        self.started.append(p.pid)
        return p

    def _log_tail(self, name):
        for f in (self.dir / "log" / f"{name}.out", ):
            try:
                lines = [x for x in f.read_text(errors="replace").splitlines() if x.strip()]
            except OSError:
                continue
            if lines:
                return lines[-1][-200:]
        return "see " + str(self.dir / "log")

    def _wait(self, pred, timeout, what, watch=()):
        deadline = time.monotonic() + timeout
        while True:
            for name in watch:
                p = self.procs.get(name)
                if p is not None and p.poll() is not None:
                    raise RuntimeError(f"{name} exited with status {p.returncode} while "
                                       f"waiting for {what}: {self._log_tail(name)}")
            if pred():
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.2)

    # -- the cluster -------------------------------------------------------------------------

    def start(self):
        """Make and start the cluster, the gateway and an S3 user. RuntimeError if it cannot;
        whatever was started by then is stopped again."""
        why = missing()
        if why:
            raise RuntimeError(why)
        try:
            self._start()
        except BaseException as e:
            self.stop()
            if isinstance(e, RuntimeError):
                raise
            if isinstance(e, (OSError, subprocess.SubprocessError)):
                raise RuntimeError(f"Ceph RGW did not start: {e}") from e
            raise

    def _start(self):
        if self.dir.exists():
            raise RuntimeError(f"{self.dir} exists already: an Rgw needs a fresh directory")
        self.dir.mkdir(parents=True)
        self._made_dir = True
        for sub in ("run", "log", "mon", "osd", "rgw", "crash"):
            (self.dir / sub).mkdir()
        self.mon_port, self.port = _free_port(), _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.conf.write_text(CONF.format(fsid=uuid.uuid4(), mon_port=self.mon_port,
                                         rgw_port=self.port, d=self.dir,
                                         block_size=16 << 30))
        (self.dir / "keyring").write_text("")
        monmap = self.dir / "monmap"
        self._cmd("monmaptool", "--create", "--clobber", "--fsid",
                  re.search(r"fsid = (\S+)", self.conf.read_text()).group(1),
                  "--addv", "a", f"[v2:127.0.0.1:{self.mon_port}]", str(monmap))
        self._cmd("ceph-mon", "--mkfs", "-i", "a", "--monmap", str(monmap))
        self._daemon("mon.a", "ceph-mon", "-i", "a")
        self._wait(lambda: _port_open(self.mon_port), 30, "ceph-mon to listen",
                   watch=["mon.a"])
        osd_uuid = str(uuid.uuid4())
        osd_id = self._cmd("ceph", "osd", "new", osd_uuid, timeout=60).strip()
        if osd_id != "0":
            raise RuntimeError(f"ceph osd new answered {osd_id!r}, not 0")
        self._cmd("ceph-osd", "-i", "0", "--mkfs", "--osd-uuid", osd_uuid, timeout=120)
        self._daemon("osd.0", "ceph-osd", "-i", "0")
        self._wait(self._osd_up, 60, "ceph-osd to be up", watch=["mon.a", "osd.0"])
        self._start_rgw()
        self._cmd("radosgw-admin", "user", "create", f"--uid={self.USER}",
                  "--display-name=tierfs tests", f"--access-key={self.access_key}",
                  f"--secret={self.secret_key}", timeout=60)

    def _osd_up(self):
        out = self._cmd("ceph", "osd", "stat", timeout=30, check=False)
        return re.search(r"1 osds: 1 up", out) is not None

    def _start_rgw(self, tries=3):
        """Start radosgw and wait until it listens. radosgw 16 sometimes dies of SIGSEGV while
        it starts again right after a SIGKILL (seen once under load, status -11): a start that
        dies of a signal is tried again, up to @tries in all; any other failure is raised."""
        for i in range(tries):
            self.starts += 1
            p = self._daemon("rgw", "radosgw", "-n", "client.rgw")
            try:
                self._wait(lambda: _port_open(self.port), 90,
                           f"radosgw to listen on {self.port}", watch=["mon.a", "osd.0", "rgw"])
                return
            except RuntimeError:
                if p.poll() is None or p.returncode >= 0 or i == tries - 1:
                    raise
                self.procs.pop("rgw", None)
                self.crashed_starts += 1

    # -- S3 ----------------------------------------------------------------------------------

    def client(self):
        import botocore.session
        from botocore.config import Config

        s = botocore.session.get_session()
        return s.create_client(
            "s3", region_name="us-east-1", endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3},
                          max_pool_connections=16, proxies={}))

    def make_bucket(self, name):
        self.client().create_bucket(Bucket=name)

    # -- faults and the end ------------------------------------------------------------------

    def kill(self):
        """SIGKILL radosgw (the cluster stays up)."""
        p = self.procs.pop("rgw", None)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(timeout=30)

    def restart(self):
        """Start radosgw again on the same port (after kill(), or to replace a running one)."""
        self.kill()
        try:
            self._start_rgw()
        except RuntimeError:
            self.kill()
            raise

    def leftover(self):
        """Pids of daemons started here that still run (after stop(): none, or a bug)."""
        out = []
        for pid in self.started:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[0] != "Z" and os.fsencode(str(self.conf)) in argv:
                out.append(pid)
        return out

    def stop(self):
        """Stop every daemon started here (radosgw, the OSD, the monitor, in that order), then
        remove the directory it made (the OSD's sparse block file with it). Idempotent."""
        for name in ("rgw", "osd.0", "mon.a"):
            p = self.procs.pop(name, None)
            if p is None or p.poll() is not None:
                continue
            try:
                p.send_signal(signal.SIGCONT)
                p.terminate()
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=15)
            except ProcessLookupError:
                pass
        if self._made_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self._made_dir = False
