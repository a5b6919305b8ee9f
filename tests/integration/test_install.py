"""Installing tierfs: what `meson install` puts where, the man page, and /etc/fstab.

- tierfs.8 (generated at build time from the option table that --help prints) renders with
  `man -l` and lists every option --help lists, with the same words;
- `meson install` into a DESTDIR puts mount.tierfs where mount(8) looks for helpers (/sbin,
  whatever the prefix), the man page and its mount.tierfs.8 link under mandir, and a systemd
  unit whose ExecStart is the installed tierfs (checked with a second build whose prefix is not
  /usr/local);
- fstab lines of type `tierfs` (mount(8) runs /sbin/mount.tierfs) and `fuse.tierfs` (mount(8)
  runs mount.fuse3, which runs tierfs from PATH) are mounted with `mount --fstab FILE MNT` and
  `mount -T FILE MNT`, serve the right bytes and are unmounted with umount(8).

Nothing is installed on this machine: the fstab tests run in a private mount namespace
(unshare) in which the DESTDIR's sbin and prefix are overlaid (overlayfs, read-only) on /usr/sbin
and the prefix. The namespace, its mounts and the tierfs servers in it are removed at teardown,
and the test checks that /sbin/mount.tierfs does not exist outside it afterwards.

The build installed is the one TIERFS_BIN lives in (TIERFS_BUILD overrides it).
"""

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

import harness

REPO = Path(__file__).resolve().parents[2]


def _build_dir():
    d = Path(os.environ.get("TIERFS_BUILD") or Path(harness.tierfs_bin()).parent)
    if not (d / "meson-info").is_dir():
        pytest.fail(f"{d} is not a meson build directory: set TIERFS_BUILD to the build of "
                    f"TIERFS_BIN")
    return d


def _options(build):
    out = subprocess.run(["meson", "introspect", "--buildoptions", str(build)], check=True,
                         capture_output=True, text=True).stdout
    return {o["name"]: o["value"] for o in json.loads(out)}


def _install(build, destdir):
    p = subprocess.run(["meson", "install", "-C", str(build), "--no-rebuild", "--destdir",
                        str(destdir)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"meson install failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def _layout(opts):
    prefix = opts["prefix"]
    return {
        "bin": os.path.join(prefix, opts["bindir"], "tierfs"),
        "man8": os.path.join(prefix, opts["mandir"], "man8"),
        "prefix": prefix,
    }


# ---------------------------------------------------------------------------------------------
# the man page


HELP_ITEM = re.compile(r"^    (-\S+(?:, --\S+)?(?: \S+)?)\s{2,}(\S.*)$")


def _help_items():
    """(left, text) of every option line of --help: ("-o block_size=SIZE", "cache block ...")"""
    p = subprocess.run([harness.tierfs_bin(), "--help"], capture_output=True, text=True,
                       env=harness.clean_env(), timeout=30)
    assert p.returncode == 0, p.stderr
    items, prose = [], []
    for line in p.stdout.splitlines():
        m = HELP_ITEM.match(line)
        if m:
            items.append((m.group(1), m.group(2)))
        elif line.startswith("    ") and not line.strip().startswith("tierfs "):
            prose.append(line.strip())
    assert len(items) >= 35, f"--help lists only {len(items)} options:\n{p.stdout}"
    return items, " ".join(prose)


def _render(page):
    """`man -l PAGE` as plain ASCII text, one space between words."""
    p = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True, timeout=60,
                       env={**harness.clean_env(), "LANG": "C", "LC_ALL": "C",
                            "MANWIDTH": "100", "MANPAGER": "cat", "PAGER": "cat"})
    assert p.returncode == 0, f"man -l {page} failed ({p.returncode}): {p.stderr}"
    assert not p.stderr.strip(), f"man -l {page} warned: {p.stderr}"
    return " ".join(p.stdout.split())


def test_man_page_lists_every_help_option():
    page = _build_dir() / "mount-helpers" / "tierfs.8"
    assert page.is_file(), f"{page} was not built"
    text = _render(page)
    assert "tierfs, mount.tierfs - mount an object store" in text, text[:400]
    for section in ("SYNOPSIS", "DESCRIPTION", "OPTIONS", "FSTAB", "SEE ALSO"):
        assert section in text, f"the man page has no {section}"
    items, prose = _help_items()
    missing = [f"{left}: {help_text}" for left, help_text in items
               if left not in text or " ".join(help_text.split()) not in text]
    if prose not in text:
        missing.append(prose)
    assert not missing, "the man page lacks these --help lines (or words them differently):\n" \
        + "\n".join(missing)


# ---------------------------------------------------------------------------------------------
# installing


def test_install_layout(tmp_path):
    """The build under test installed into a DESTDIR: the /sbin helper, the man pages, the
    unit; then a fresh build with prefix /opt/tierfs-test: its unit and helper name that
    prefix."""
    build = _build_dir()
    opts = _options(build)
    lay = _layout(opts)
    root = tmp_path / "root"
    _install(build, root)
    assert os.access(f"{root}{lay['bin']}", os.X_OK)
    helper = root / "sbin" / "mount.tierfs"
    assert helper.is_symlink(), (
        f"meson install put no mount.tierfs in /sbin (prefix {lay['prefix']}): mount -t tierfs "
        f"would say 'unknown filesystem type'")
    assert os.readlink(helper) == lay["bin"]
    man8 = Path(f"{root}{lay['man8']}")
    assert (man8 / "tierfs.8").is_file()
    assert os.readlink(man8 / "mount.tierfs.8") == "tierfs.8"
    units = list(root.rglob("tierfs@.service"))
    assert len(units) == 1, f"installed units: {units}"
    assert f"ExecStart={lay['bin']} " in units[0].read_text()

    # another prefix: a second, small build (no tests) configured from the same sources
    other = tmp_path / "build-opt"
    p = subprocess.run(["meson", "setup", str(other), str(REPO), "--prefix=/opt/tierfs-test",
                        "-Dtests=false"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    p = subprocess.run(["meson", "compile", "-C", str(other)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    root2 = tmp_path / "root-opt"
    _install(other, root2)
    assert os.readlink(root2 / "sbin" / "mount.tierfs") == "/opt/tierfs-test/bin/tierfs"
    unit = (root2 / "opt/tierfs-test/lib/systemd/system/tierfs@.service").read_text()
    assert "ExecStart=/opt/tierfs-test/bin/tierfs " in unit
    assert "/usr/local" not in unit
    assert (root2 / "opt/tierfs-test/share/man/man8/tierfs.8").is_file()


# ---------------------------------------------------------------------------------------------
# /etc/fstab, in a private mount namespace


class Namespace:
    """A private mount namespace held open by a sleeping process. run() executes a command in
    it (nsenter); path() is a host path that resolves inside it (/proc/PID/root)."""

    def __init__(self):
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             "echo ready; exec sleep 100000"], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self.pid = self.proc.pid
        self.ns = os.readlink(f"/proc/{self.pid}/ns/mnt")
        assert self.ns != os.readlink("/proc/self/ns/mnt")

    def run(self, argv, env=None, timeout=60):
        return subprocess.run(["nsenter", "-t", str(self.pid), "-m", "--"] + list(argv),
                              capture_output=True, text=True, env=env, timeout=timeout)

    def path(self, p):
        return Path(f"/proc/{self.pid}/root{p}")

    def mounts(self):
        """{mount point: fs type} inside the namespace."""
        out = {}
        with open(f"/proc/{self.pid}/mountinfo") as f:
            for line in f:
                a, b = line.split(" - ", 1)
                out[a.split()[4]] = b.split()[0]
        return out

    def others(self):
        """pids of processes in the namespace besides its holder (the tierfs servers)."""
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == self.pid:
                continue
            try:
                if os.readlink(f"/proc/{d}/ns/mnt") == self.ns:
                    pids.append(int(d))
            except OSError:
                pass
        return pids

    def close(self, fuse_mounts):
        for m in fuse_mounts:
            if m in self.mounts():
                self.run(["umount", "-l", m])
        for pid in self.others():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def installed_ns(tmp_path):
    """The build installed into a DESTDIR and overlaid, inside a private mount namespace, on
    /usr/sbin (= /sbin) and the prefix."""
    if os.path.lexists("/sbin/mount.tierfs"):
        pytest.fail("/sbin/mount.tierfs exists on this machine: the test could not tell its "
                    "own install from it (remove it)")
    build = _build_dir()
    lay = _layout(_options(build))
    root = tmp_path / "root"
    _install(build, root)
    ns = Namespace()
    fuse_mounts = []
    try:
        for lower, target in ((root / "sbin", "/usr/sbin"),
                              (Path(f"{root}{lay['prefix']}"), lay["prefix"])):
            if not lower.is_dir():
                continue  # nothing installed there: mount(8) will not find it
            r = ns.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={lower}:{target}", target])
            assert r.returncode == 0, f"overlay on {target}: {r.stderr}"
        # libmount keeps helper mounts' options in /run/mount/utab: keep ours private
        r = ns.run(["sh", "-c", "mkdir -p /run/mount && mount -t tmpfs tmpfs /run/mount"])
        assert r.returncode == 0, r.stderr
        ns.lay = lay
        ns.fuse_mounts = fuse_mounts
        yield ns
    finally:
        ns.close(fuse_mounts)
    assert not os.path.lexists("/sbin/mount.tierfs"), "the test left /sbin/mount.tierfs"


def _store(tmp_path):
    src = tmp_path / "store"
    (src / "dir").mkdir(parents=True)
    files = {"a.bin": os.urandom(3 * 65536 + 17), "dir/b.bin": os.urandom(1000)}
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    return src, files


@pytest.mark.parametrize("fstype,how", [("tierfs", "--fstab"), ("fuse.tierfs", "-T")])
def test_fstab_mount_and_umount(fuse, tmp_path, installed_ns, fstype, how):
    ns = installed_ns
    src, files = _store(tmp_path)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    fstab = tmp_path / "fstab"
    fstab.write_text(
        "# a temporary fstab for test_install\n"
        f"file://{src}  {mnt}  {fstype}  allow_other,_netdev,nofail,noatime,"
        "block_size=64K,hot_size=1M,lagging_size=1M,x-systemd.automount  0 0\n")
    sandir = tmp_path / "san"
    env = harness.tierfs_env({"PATH": f"{ns.lay['prefix']}/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
                             sandir)
    ns.fuse_mounts.append(str(mnt))
    r = ns.run(["mount", how, str(fstab), str(mnt)], env=env)
    assert r.returncode == 0, (
        f"mount {how} with an fstab line of type {fstype} failed ({r.returncode}): "
        f"{r.stderr.strip()}")
    assert ns.mounts().get(str(mnt)) == "fuse.tierfs", ns.mounts().get(str(mnt))
    assert not harness.mounted(mnt), "the mount leaked out of the namespace"
    for rel, data in files.items():
        assert ns.path(f"{mnt}/{rel}").read_bytes() == data, rel
    servers = ns.others()
    assert servers, "no tierfs server runs in the namespace"

    r = ns.run(["umount", str(mnt)], env=env)
    assert r.returncode == 0, f"umount: {r.stderr}"
    assert str(mnt) not in ns.mounts()
    harness.wait_until(lambda: not ns.others(), 20, "the tierfs server to exit after umount")
    found = harness.sanitizer_reports(sandir)
    assert not found, found
