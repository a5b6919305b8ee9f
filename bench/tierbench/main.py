"""The tierfs benchmark suite, run by scripts/bench (which installs packages and builds first).

Servers (127.0.0.1, free ports): one nginx with three listeners over one generated data set
(JSON autoindex for tierfs, HTML autoindex for rclone and httpdirfs, and a reverse proxy in
front of s3rver so that S3 traffic is counted in the same access log), and s3rver.

Systems: tierfs (http, and s3 via s3rver), the ceilings bench/nullfs (null FUSE filesystem,
same mount flags) and curl (one GET of the same object from the same server), the peers s3fs,
rclone mount (--vfs-cache-mode full) and httpdirfs (--cache).

Scenarios (interleaved runs A B C A B C ..., medians and min-max):
  1 cold sequential read (fresh mount, source file warm in the server's page cache)
  2 cached sequential re-read: same mount, the kernel's caches dropped first (echo 3 >
    /proc/sys/vm/drop_caches: pages, dentries and inodes), so the reads reach the
    filesystem's own cache; for tierfs a run counts only if .tierfs/stats shows that tierfs
    served every byte and fetched none, else it is reported invalid. 2b, a labelled extra
    row: the old posix_fadvise(DONTNEED) variant, which may be page-cache hits
  3 4 KiB random O_DIRECT reads of the cached object, the caches dropped before each slice
    and the same check: IOPS, p50/p99 latency
  4 16 readers of one cold object, reader i starting at i/16: bytes at the server / object
  5 isolation: tail 4 KiB O_DIRECT re-reads of a hot working set, alone and during a replay
    of old objects several times the cache size; tail hit ratio from .tierfs/stats
  6 lagging rate accuracy at 20M and 100M: bytes at the server over time, burst subtracted
  7 peak RSS (VmHWM) of every tierfs mount against hot_size + lagging_size
  8 peak RSS under load: 64 threads read 64 different cold objects at once (block_size 4M,
    hot_size 32M, lagging off, max_conns 64), against hot_size + 64 MiB
  9 broker, on http (nginx) and s3 (s3rver): a producer uploads a 64 MiB segment with its
    indexes every few seconds, a tail consumer opens each by name as soon as it exists, maps
    its index MAP_SHARED and reads it, a lagging consumer serves random old offsets (index
    lookup, 8 KiB read), paused every other segment: upload -> first byte, tail p99 alone and
    during the replay, hot hit ratio, lagging bytes at the server per byte read (see
    tests/integration/broker_sim.py; test_broker.py is the short form)
 10 metadata (issue 8), `--only meta`:
    a upload -> first byte by name: new 64 KiB objects PUT to s3rver one at a time, a reader
      per mount (tierfs-s3, s3fs, rclone mount :s3:, the peers with their documented
      freshness options) polls open + read(1) every 10 ms; p50/p99 from the PUT's answer
    b `ls -l` of 100k keys in one prefix (20k with --quick) on the http backend (s3rver
      takes minutes to be filled with as many keys, so no s3fs): drop_caches, a fresh mount,
      time and peak RSS of tierfs, rclone :http: and httpdirfs
    c tierfs behind tests/integration/faultproxy.py: once what it needs is listed and
      cached, every request to the store stalls; with 32 lookups of unknown names waiting on
      it, stats of known names and O_DIRECT reads of cached blocks, p50/p99 (bound 100 ms)
 11 random reads of old data (issue 14), `--only lagrand`: 4 KiB O_DIRECT random reads of a
    cold lagging object, 4 threads, default lagging_rate and block_size: IOPS against what
    whole-block fetches allow at that rate (rate / block_size), and KiB fetched per read;
    11b the same reads of that object as a hot one 4x the hot tier (parts too)
  disk (--only disk): the disk tier (cache_dir). A disk hit (memory tiers empty, page cache
    dropped) against preading the same bytes from a local file on the same disk; recovery of
    a large cache at mount (filled by bench/diskfill through disk.c), mount to first answer;
    a warm restart (clean unmount, page cache dropped): bytes fetched from the store and time
    to re-read the working set, tierfs vs s3fs (use_cache) and rclone (--vfs-cache-mode full)
 12 a fleet on one Redis (--only shared): 1, 2 and 3 mounts read the same new objects at once,
    each from its own share of them, with and without shared=: bytes at the server per byte of
    the objects, and the p99 of the readers' 1 MiB reads (worst mount); then 3 shared mounts
    again, each reader paced at shared_pace (a consumer tailing at a broker's rate, not at
    full speed)
 13 fleet_lagging_rate over 3 mounts replaying old objects: the slope of bytes at the server
    over the fetches' start times, from 1 s after the first, against the rate
 12d the shared scenario on a Redis Cluster (--only cluster, bench/shared_cluster.py): 3 mounts
    read each block once; a master killed mid-run costs at most the blocks it held.
 12c the MAC's cost on a shared hit (--only mac): a fresh mount reads the new objects, every
    block from Redis (another mount put them there), with shared_key and without: MiB/s, rounds
    interleaved, each on a fresh mount with its memory taken at mount (prefault=on)
  trace (--only trace, issue 31): full-speed cached reads of one mount with trace=FILE against
    one without, interleaved: 1 MiB sequential (MB/s) and 4 KiB O_DIRECT random (IOPS), each
    pass checked to be served by tierfs; the ratio on/off (target >= 0.95), and every read
    recorded, none dropped
  sim (--only sim, issue 31): tierfs-sim's speed on one core: one broker's hour of the sizing
    example (docs/sizing.md) replayed, reads per second of CPU (target >= 1M); and a fleet of
    100 such brokers over an hour, wall time of the replay (target < 60 s). The generated
    traces are kept in BENCH_WORK between runs

  write (--only write, issue 29): writing through the mount, every file seq_size bytes
    W1 sequential write, 1 MiB and 8 KiB writes (Files.copy writes 8 KiB), open() to close():
       to s3rver, tierfs (defaults + allow_write) against s3fs and rclone mount :s3:
       --vfs-cache-mode writes (timed to the object's arrival: it uploads after close), every
       object checked whole by a HEAD; to file://, against the same loop writing a local file
       on the same filesystem + fsync. One mount per system for all runs, a first write untimed
    W2 the written object read back after drop_caches: bytes fetched from the store
       (tierfs_backend_received_bytes_total), (a) the writing mount, (b) a second mount sharing
       its Redis once the writer put the blocks there; sha256 of the bytes read
    W3 peak RSS (VmHWM) while 4 files are written at once, against hot_size + lagging_size +
       64 MiB + write_buffer (tierfs_memory_bound_bytes)

Everything started here is recorded in RUN/state (mounts, pids) so that scripts/bench's trap
can clean up even if this process is killed; this process cleans up itself on any exit.
"""
from . import common
from .common import *  # noqa: F401,F403
from .core import BenchCore
from .broker import BrokerScenario, broker_report
from .disk import DiskScenario, disk_report
from .isolation import IsolationScenario
from .lagrand import LagrandScenario, lagrand_report
from .mac import MacScenario
from .memory import MemoryScenario
from .meta import MetaScenario, meta_report
from .multi import MultiScenario
from .rate import RateScenario
from .report import build_report, draw_chart, write_results
from .seq import SeqScenario, cold_report
from .shared import SharedScenario, shared_report
from .sim import SimScenario, sim_report
from .trace import TraceScenario
from .write import WriteScenario, write_report


class Bench(BenchCore, SeqScenario, MultiScenario, IsolationScenario, RateScenario,
            MemoryScenario, BrokerScenario, MetaScenario, LagrandScenario, DiskScenario,
            SharedScenario, MacScenario, TraceScenario, SimScenario, WriteScenario):
    """The whole bench: the core, and one mix-in class a scenario (each in its own module)."""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--peers", dest="peers", action="store_true", default=None)
    ap.add_argument("--no-peers", dest="peers", action="store_false")
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--only", default="",
                    help="comma list of scenarios: seq,multi,iso,rate,mem,broker,meta,lagrand,"
                    "disk,shared,mac,trace,sim,write; cluster (bench/shared_cluster.py)")
    ap.add_argument("--set", action="append", default=[], metavar="PARAM=VALUE",
                    help="override a parameter (see Bench.p), e.g. --set iso_seconds=30")
    ap.add_argument("--chart-only", action="store_true",
                    help="redraw results.png from OUT/results.json, run nothing")
    ap.add_argument("--tierfs", required=True)
    ap.add_argument("--nullfs", required=True)
    ap.add_argument("--preader", required=True)
    ap.add_argument("--diskfill", help="bench/diskfill (default: bench/diskfill beside --tierfs)")
    ap.add_argument("--sim", help="tierfs-sim (default: sim/tierfs-sim beside --tierfs)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    common.TIERFS = Path(args.tierfs)
    common.NULLFS, common.PREADER = Path(args.nullfs), Path(args.preader)
    built = common.TIERFS.parent
    common.DISKFILL = Path(args.diskfill) if args.diskfill else built / "bench" / "diskfill"
    common.SIM = Path(args.sim) if args.sim else built / "sim" / "tierfs-sim"
    if args.chart_only:
        raw = json.loads((Path(args.out) / "results.json").read_text())
        b = argparse.Namespace(out=Path(args.out), run_dir=Path(args.work),
                               quick=raw["params"]["seq_size"] < GiB)
        Path(args.work).mkdir(parents=True, exist_ok=True)
        draw_chart(b, [(t["name"], t["value"], t["limit"], t["kind"]) for t in raw["targets"]],
                   raw["runs"]["seq"])
        return 0
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    atexit.register(cleanup)
    b = Bench(args)
    b.load_start = Path("/proc/loadavg").read_text().split()[:3]
    t0 = time.monotonic()
    only = set(filter(None, args.only.split(",")))
    try:
        b.setup()
        seq = b.scen_seq() if not only or "seq" in only else None
        multi = b.scen_multi() if not only or "multi" in only else None
        iso = b.scen_isolation() if not only or "iso" in only else None
        rate = b.scen_rate() if not only or "rate" in only else None
        if not only or "mem" in only:
            b.scen_memory()
        if not only or "broker" in only:
            b.scen_broker()
        if not only or "meta" in only:
            b.scen_meta()
        if not only or "lagrand" in only:
            b.scen_lagrand()
        if not only or "disk" in only:
            b.scen_disk()
        if not only or "shared" in only:
            b.scen_shared()
        if "cluster" in only:  # 12d, the shared scenario on a Redis Cluster (on request only)
            subprocess.run([sys.executable, str(Path(__file__).parent.parent / "shared_cluster.py"),
                            "--json", str(b.out / "shared_cluster.json")], check=False,
                           env={**os.environ, "TIERFS_BIN": args.tierfs})
        if not only or "mac" in only:
            b.scen_mac()
        if not only or "trace" in only:
            b.scen_trace()
        if not only or "sim" in only:
            b.scen_sim()
        if not only or "write" in only:
            b.scen_write()
    finally:
        cleanup()
    if only:
        print(json.dumps(b.raw["runs"], indent=1, default=str))
        print(json.dumps(b.hwm, indent=1, default=str))
        cr, ct = cold_report(b, seq, ["nullfs", "curl", "s3fs", "rclone", "httpdirfs"]) \
            if seq else ([], [])
        for name, tcell, cells, target, met in cr:  # rows 1-1c
            peers = "; ".join(f"{k} {v} ({fmt_num(r)}x)" for k, (v, r) in cells.items()
                              if v != "n/a")
            print(f"| {name} | {tcell} | {peers or '-'} | {target} | "
                  f"{'met' if met else 'MISSED' if met is not None else ''} |")
        br, bt = broker_report(b, [])
        mr, mt = meta_report(b, ["s3fs", "rclone", "httpdirfs"])
        for name, tcell, _, target, met in br:  # scenario 9's rows, as in the results table
            print(f"| {name} | {tcell} | {target} | {'met' if met else 'MISSED'} |")
        for name, tcell, cells, target, met in mr:  # scenario 10's
            peers = "; ".join(f"{k}: {v}" for k, (v, _) in cells.items() if v != "n/a")
            print(f"| {name} | {tcell} | {peers or 'no peers'} | {target} | "
                  f"{'' if met is None else 'met' if met else 'MISSED'} |")
        lr, lt = lagrand_report(b, [])
        for name, tcell, _, target, met in lr:  # scenario 11's
            print(f"| {name} | {tcell} | {target} | {'met' if met else 'MISSED'} |")
        dr, dt = disk_report(b, ["s3fs", "rclone"])
        for name, tcell, cells, target, met in dr:  # scenario disk's rows
            peers = "; ".join(f"{k} {v}" for k, (v, _) in cells.items() if v != "n/a")
            print(f"| {name} | {tcell} | {peers or '-'} | {target} | "
                  f"{'met' if met else 'MISSED' if met is not None else ''} |")
        sr, st = shared_report(b, [])
        for name, tcell, _, target, met in sr:  # scenarios 12-13's rows
            print(f"| {name} | {tcell} | {target} | {'met' if met else 'MISSED'} |")
        xr, xt = sim_report(b, [])
        for name, tcell, _, target, met in xr:  # scenarios trace and sim
            print(f"| {name} | {tcell} | {target} | {'met' if met else 'MISSED'} |")
        wr, wt = write_report(b, ["s3fs", "rclone"])
        for name, tcell, cells, target, met in wr:  # scenario write's rows
            peers = "; ".join(f"{k} {v} ({fmt_num(r)}x)" for k, (v, r) in cells.items()
                              if v != "n/a")
            print(f"| {name} | {tcell} | {peers or '-'} | {target} | "
                  f"{'SKIPPED' if met is None else 'met' if met else 'MISSED'} |")
        bt += ct + mt + lt + dt + st + xt + wt
        for n in b.notes:
            print(f"note: {n}")
        for name, v, lim, kind in bt:
            print(f"| {name} | {fmt_num(v)} | {kind} {lim if kind == 'band' else fmt_num(lim)} | "
                  f"{'met' if lim is not None and target_ok(v, lim, kind) else 'MISSED'} |")
        # scenarios trace and sim fail the run below their targets
        missed = [name for name, v, lim, kind in xt if not target_ok(v, lim, kind)]
        if missed:
            log(f"targets missed: {', '.join(missed)}")
            return 1
        return 0
    elapsed = time.monotonic() - t0
    cols, rows, targets = build_report(b, seq, multi, iso, rate)
    sr, st = shared_report(b, cols)
    xr, xt = sim_report(b, cols)
    wr, wt = write_report(b, cols)
    rows, targets = rows + sr + xr + wr, targets + st + xt + wt
    text = write_results(b, cols, rows, targets, b.machine(), elapsed)
    draw_chart(b, targets, seq)
    print()
    print(text)
    missed = [t["name"] for t in b.raw["targets"] if not target_ok(t["value"], t["limit"],
                                                                   t["kind"])]
    log(f"finished in {elapsed:.0f}s; targets missed: {', '.join(missed) if missed else 'none'}")
    return 0
