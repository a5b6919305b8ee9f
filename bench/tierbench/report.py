"""The report: the results table, results.md and results.json, and the chart."""
from . import common
from .common import *  # noqa: F401,F403

from .broker import broker_report
from .disk import disk_report
from .lagrand import lagrand_report
from .meta import meta_report
from .seq import cold_report



def build_report(b, seq, multi, iso, rate):
    """The table rows: (scenario, tierfs cell, {column: (cell, ratio)}, target, met)."""
    cols = ["nullfs", "curl", "s3fs", "rclone", "httpdirfs"]
    rows = []
    targets = []

    def ratio(a, c):
        return a / c if a and c else None

    prr = per_run_ratio

    def col(s, k):
        return seq[s][k] if s in seq else []

    r1, t1 = cold_report(b, seq, cols)
    rows += r1
    targets += t1
    # 2 cached sequential
    t = col("tierfs", "cached")
    cells = {}
    for k in cols:
        if k in seq and any(col(k, "cached")):
            cells[k] = (cell(col(k, "cached"), " MB/s"), prr(t, col(k, "cached")))
        else:
            cells[k] = ("n/a", None)
    r_null = cells["nullfs"][1]
    inv = [w for ws in seq["tierfs"].get("invalid", []) if ws for w in ws]
    nruns = len(col("tierfs", "cached"))
    bad2 = sum(1 for ws in seq["tierfs"].get("invalid", []) if ws and any(
        w.startswith("2:") for w in ws))
    rows.append(("2. cached sequential re-read, MB/s (same mount, echo 3 > drop_caches before "
                 "each pass; tierfs: a run counts only if it served every byte and fetched none)",
                 cell(t, " MB/s") + (f"; **{bad2} of {nruns} runs INVALID**" if bad2 else ""),
                 cells, ">= 0.8x nullfs, every run valid",
                 r_null is not None and r_null >= 0.8 and not bad2))
    targets.append(("cached seq vs nullfs", r_null, 0.8, "min"))
    bad_runs = sum(1 for ws in seq["tierfs"].get("invalid", []) if ws)
    targets.append(("cached runs valid (tierfs served every byte, fetched none)",
                    (nruns - bad_runs) / nruns if nruns else None, 1.0, "min"))
    for w in inv:
        b.notes.append(f"invalid cached measurement: {w}")
    # 2b the fadvise variant, for comparison only
    cells = {}
    tf = col("tierfs", "fadvise") if "tierfs" in seq else []
    for k in cols:
        fv = seq[k].get("fadvise") if k in seq else None
        cells[k] = (cell(fv, " MB/s"), prr(tf, fv)) if fv and any(fv) else ("n/a", None)
    rows.append(("2b. (extra) the same re-read after posix_fadvise(DONTNEED) only, right after "
                 "a read: may be served by the page cache, kept to compare with older results",
                 cell(tf, " MB/s"), cells, "(info)", None))
    # 3 random reads
    cells = {}
    iops = {k: [r["iops"] if r else None for r in seq[k]["rand"]] for k in seq
            if any(seq[k]["rand"])}
    p50 = {k: [r["lat_us"]["p50"] for r in seq[k]["rand"] if r] for k in iops}
    p99 = {k: [r["lat_us"]["p99"] for r in seq[k]["rand"] if r] for k in iops}
    for k in cols:
        if k in iops:
            cells[k] = (f"{cell(iops[k])} IOPS, p50/p99 {fmt_num(median(p50[k]))}/"
                        f"{fmt_num(median(p99[k]))} us", prr(iops.get("tierfs", []), iops[k]))
        else:
            cells[k] = ("n/a", None)
    r_null = cells["nullfs"][1]
    bad3 = sum(1 for ws in seq["tierfs"].get("invalid", []) if ws and any(
        w.startswith("3:") for w in ws))
    rows.append(("3. 4 KiB random O_DIRECT reads of the cached object, 1 thread QD1 (IOPS, "
                 "p50/p99 latency; drop_caches before each slice, tierfs checked as in 2)",
                 f"{cell(iops.get('tierfs', []))} IOPS, p50/p99 "
                 f"{fmt_num(median(p50.get('tierfs', [])))}/"
                 f"{fmt_num(median(p99.get('tierfs', [])))} us"
                 + (f"; **{bad3} runs INVALID**" if bad3 else ""),
                 cells, ">= 0.8x nullfs IOPS, every run valid",
                 r_null is not None and r_null >= 0.8 and not bad3))
    targets.append(("4K random IOPS vs nullfs", r_null, 0.8, "min"))
    # 4 sixteen readers
    cells = {}
    tr = [e["ratio"] for e in multi["tierfs"]]
    for k in cols:
        if k in multi and k != "nullfs":
            rr = [e["ratio"] for e in multi[k]]
            cells[k] = (f"{cell(rr, 'x')} fetched, {fmt_num(median([e['mbps'] for e in multi[k]]))}"
                        " MB/s", ratio(summarize(tr)[0], summarize(rr)[0]))
        elif k == "nullfs":
            cells[k] = (f"{fmt_num(median([e['mbps'] for e in multi[k]]))} MB/s aggregate",
                        ratio(median([e["mbps"] for e in multi["tierfs"]]),
                              median([e["mbps"] for e in multi[k]])))
        elif k == "curl":
            cells[k] = ("1.00x (one GET)", None)
        else:
            cells[k] = ("n/a", None)
    worst = max(tr)
    rows.append(("4. 16 readers of one cold object, reader i from i/16: bytes at server / object "
                 "(aggregate MB/s)", f"{cell(tr, 'x')} fetched, "
                 f"{fmt_num(median([e['mbps'] for e in multi['tierfs']]))} MB/s", cells,
                 "<= 1.05x (every run)", worst <= 1.05))
    targets.append(("16 readers fetched/object", worst, 1.05, "max"))
    # 5 isolation
    a99 = [x["lat_us"]["p99"] for x in iso["alone"]]
    w99 = [x["lat_us"]["p99"] for x in iso["replay"]]
    a50 = [x["lat_us"]["p50"] for x in iso["alone"]]
    w50 = [x["lat_us"]["p50"] for x in iso["replay"]]
    pr = [w / a for w, a in zip(w99, a99)]
    r99 = median(pr)
    # the noise floor: the same ratio between consecutive slices that both ran alone
    aa = [y / x for x, y in zip(a99, a99[1:])]
    hr = iso["total_hit_ratio"]
    rb = iso["replay_bytes"]
    cells = {k: ("n/a", None) for k in cols}
    rows.append(("5. isolation: tail 4 KiB O_DIRECT re-reads of the hot set, p50/p99 us alone "
                 "vs during a replay of old objects (replay volume in cache sizes); tail hit ratio",
                 f"alone {fmt_num(median(a50))}/{fmt_num(median(a99))}, replay "
                 f"{fmt_num(median(w50))}/{fmt_num(median(w99))} (replay "
                 f"{rb['lagging_fetched'] / rb['cache_bytes']:.1f}x the cache); p99 ratio "
                 f"{r99:.2f}x [{min(pr):.2f}–{max(pr):.2f}] over {len(pr)} pairs (alone "
                 f"against the next alone slice: {fmt_num(median(aa) if aa else None)}x "
                 f"[{fmt_num(min(aa, default=None))}–{fmt_num(max(aa, default=None))}]); "
                 f"hit ratio {100 * hr:.2f}%", cells,
                 "p99 ratio <= 1.2x, hit ratio >= 99%", r99 <= 1.2 and hr >= 0.99))
    mf = iso.get("machine")
    if mf:
        m99 = [w["lat_us"]["p99"] / a["lat_us"]["p99"] for a, w in zip(mf["alone"], mf["curl"])]
        rows.append(("5b. (extra) the machine's floor for row 5: the same tail reads, with the "
                     f"replay's bytes ({mf['rate']}B/s) read by two curl processes straight from "
                     "nginx instead of through tierfs", f"p99 ratio {median(m99):.2f}x "
                     f"[{min(m99):.2f}–{max(m99):.2f}] over {len(m99)} pairs; row 5 / this "
                     f"{r99 / median(m99):.2f}x", cells, "(info)", None))
    targets.append(("isolation p99 with/alone", r99, 1.2, "max"))
    targets.append(("isolation tail hit ratio", hr, 0.99, "min"))
    # 6 rate accuracy
    parts, ok = [], True
    for rt, es in rate.items():
        acc = [e["accuracy"] for e in es]
        ok = ok and all(abs(a - 1) <= 0.05 for a in acc)
        parts.append(f"{rt}: " + " ".join(f"{a:.3f}x" for a in acc))
        worst = max(acc, key=lambda a: abs(a - 1))
        targets.append((f"lagging rate {rt} accuracy", worst, (0.95, 1.05), "band"))
    rows.append(("6. lagging rate accuracy (bytes at server / time, burst subtracted) / "
                 "configured rate", "; ".join(parts), {k: ("n/a", None) for k in cols},
                 "within ±5%", ok))
    # 7 peak RSS
    th = [h for h in b.hwm if h["cache_bytes"]]
    worst = max(th, key=lambda h: h["vm_hwm"] - h["cache_bytes"])
    over = max(h["vm_hwm"] / (h["cache_bytes"] + 64 * MiB) for h in th)
    cells = {k: ("n/a", None) for k in cols}
    for k in cols:
        # scenario 10's ls -l of many keys is a row of its own
        hs = [h["vm_hwm"] for h in b.hwm if h["system"] == k
              and not h.get("note", "").startswith("scenario 10 (ls")]
        if hs:
            cells[k] = (f"{max(hs) / MiB:.0f} MiB (own cache settings)", None)
    rows.append(("7. peak RSS (VmHWM), worst tierfs mount vs hot_size + lagging_size",
                 f"{worst['vm_hwm'] / MiB:.0f} MiB for {worst['cache_bytes'] / MiB:.0f} MiB of "
                 f"cache (+{(worst['vm_hwm'] - worst['cache_bytes']) / MiB:.0f} MiB)", cells,
                 "<= caches + 64 MiB (every mount)", over <= 1.0))
    targets.append(("peak RSS / (caches + 64M)", over, 1.0, "max"))
    # 8 peak RSS under 64 cold readers
    mem = b.raw["runs"].get("memory")
    if mem:
        r = mem["vm_hwm"] / mem["bound"]
        rows.append(("8. peak RSS (VmHWM), 64 threads reading 64 cold objects at once "
                     "(block_size 4M, hot_size 32M, lagging off, max_conns 64)",
                     f"{mem['vm_hwm'] / MiB:.0f} MiB", {k: ("n/a", None) for k in cols},
                     "<= hot_size + 64 MiB (96 MiB)", r <= 1.0))
        targets.append(("peak RSS 64 cold readers / (hot_size + 64M)", r, 1.0, "max"))
    br, bt = broker_report(b, cols)
    mr, mt = meta_report(b, cols)
    lr, lt = lagrand_report(b, cols)
    dr, dt = disk_report(b, cols)
    return cols, rows + br + mr + lr + dr, targets + bt + mt + lt + dt


def write_results(b, cols, rows, targets, machine, elapsed):
    out = b.out
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    lines.append(f"# tierfs benchmark results ({'quick' if b.quick else 'full'} run)")
    lines.append("")
    lines.append(f"Generated by `scripts/bench{' --quick' if b.quick else ''}` on "
                 f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')} in {elapsed:.0f} s. Medians of "
                 f"interleaved runs, [min–max]; in parentheses tierfs's ratio to that column "
                 f"(tierfs / other, the median of the per-run ratios: > 1 is better for throughput "
                 f"and IOPS, < 1 for the fetched-bytes row). Raw data: `results.json`.")
    lines.append("")
    lines.append("| scenario | tierfs | " + " | ".join(
        {"nullfs": "nullfs (ceiling)", "curl": "curl (ceiling)"}.get(c, c) for c in cols)
        + " | target | met |")
    lines.append("|" + "---|" * (len(cols) + 4))
    for name, tcell, cells, target, met in rows:
        cs = []
        for c in cols:
            v, r = cells.get(c, ("n/a", None))
            cs.append(v if r is None else f"{v} ({r:.2f}x)")
        m = "" if met is None else ("**met**" if met else "**MISSED**")
        lines.append(f"| {name} | {tcell} | " + " | ".join(cs) + f" | {target} | {m} |")
    lines.append("")
    lines.append("## Targets")
    lines.append("")
    lines.append("| target | tierfs | limit | met |")
    lines.append("|---|---|---|---|")
    for name, v, lim, kind in targets:
        ok = target_ok(v, lim, kind)
        ls = f"{lim[0]}–{lim[1]}" if kind == "band" else (f">= {lim}" if kind == "min"
                                                          else f"<= {lim}")
        lines.append(f"| {name} | {'n/a' if v is None else f'{v:.3f}'} | {ls} | "
                     f"{'met' if ok else 'MISSED'} |")
    lines.append("")
    lines.append("## How each figure is taken")
    lines.append("")
    p = b.p
    lines += [
        f"- Data: generated incompressible objects on local disk, read once before the runs so "
        f"nginx and s3rver send them from the page cache (read again before every run and "
        f"scenario, as the cached scenarios drop every cache). "
        f"seq.bin {p['seq_size'] // MiB} MiB; hot/ {p['hot_files']} x "
        f"{p['hot_file_size'] // MiB} MiB (mtime now); old/ {p['old_files']} x "
        f"{p['old_file_size'] // MiB} MiB (mtime 30 days ago).",
        f"- Servers on 127.0.0.1: nginx (sendfile, one worker) with a JSON-index listener "
        f"(tierfs, curl), an HTML-index listener (rclone, httpdirfs) and a proxy listener in "
        f"front of s3rver {machine['s3rver']} (tierfs-s3, s3fs, curl-s3), all in one access "
        f"log; bytes at the server are its $body_bytes_sent.",
        f"- tierfs for 1-4: `-o hot_size={size_opt(512 * MiB if b.quick else 2 * GiB)},"
        f"hot_ttl=100000000`, other options default (block_size 4M, readahead 2). nullfs: "
        f"bench/nullfs.c, the same FUSE flags as tierfs (low level, 16 workers, max_write and "
        f"max_readahead 1 MiB, read_ahead_kb 1024, keep_cache), replying from an in-memory arena.",
        "- Peers: s3fs `use_cache=DIR` against s3rver (through the proxy), rclone mount "
        "`:http: --vfs-cache-mode full --read-only`, httpdirfs `--cache`; every run with an "
        "empty cache directory and a fresh mount.",
        f"- Runs interleave systems (run 1: every system, run 2: every system, ...): "
        f"{p['runs']} runs for 1-3, {p['multi_runs']} for 4, {p['iso_pairs']} alone/replay "
        f"pairs for 5, {p['rate_runs']} per rate for 6.",
        "- 1: fresh mount, `preader seq` (1 MiB preads, one thread, start to end); curl: one GET "
        "to /dev/null, size / time_total.",
        "- 2: the same mount right after 1: `echo 3 > /proc/sys/vm/drop_caches` (page cache, "
        "dentries and inodes, for every system alike) before each pass, then the same "
        "sequential read; the figure is the filesystem's own cache. For tierfs each pass is "
        "checked in .tierfs/stats: read_bytes_total grew by the object size and no fetch "
        "counter grew; a run with a pass that fails the check is reported INVALID, not as a "
        "figure. Not a fresh mount. 2b: one more pass with posix_fadvise(DONTNEED) only "
        "(the old method), for comparison.",
        f"- 3: the same mount after 2: `preader rand --direct` 4 KiB O_DIRECT preads at random "
        f"aligned offsets over the whole object, one thread, {p['rand_seconds']} s in 0.5 s "
        f"slices, drop_caches before each slice and the same stats check (no fetch).",
        "- 4: fresh mount; 16 threads read the whole object with 1 MiB preads, thread i starting "
        "at i/16 of it and wrapping (page cache on, as brokers read); server bytes for the object "
        "/ object size.",
        f"- 5: one tierfs mount `hot_size={size_opt(p['iso_hot_size'])},lagging_size="
        f"{size_opt(p['iso_lagging_size'])},lagging_rate={p['iso_rate']},hot_ttl=3600`; the hot "
        f"set read once; 2 threads replay old/ in a loop (lagging tier, direct_io), and the tail "
        f"reader does {p['iso_slice']} s slices of 4 KiB O_DIRECT random re-reads of the hot "
        f"set, alternately with the replay paused (its readers wait before their next read) and running, {p['iso_pairs']} "
        f"pairs. p99 ratio = median over pairs of p99 with replay / p99 alone. Hit ratio = hot "
        f"hits / (hits + misses) in the stats over the with-replay slices. Replay volume = "
        f"lagging bytes fetched / (hot_size + lagging_size).",
        f"- 6: fresh mount per run, `lagging_rate=R` (burst 2R), 4 threads read old/ for "
        f"{p['rate_seconds']} s. From the access log: (bytes of all range GETs started up to "
        f"the last start in the window - burst) / (that start - the first start), over R. "
        f"results.json also has a least-squares slope past the burst.",
        "- 7: VmHWM of every tierfs mount just before unmounting, against its hot_size + "
        "lagging_size (the arena is prefaulted at mount).",
        f"- 10a: bucket on s3rver (mounts through the proxy); per upload a reader thread per "
        f"mount polls open(name) + read(1) with a {p['meta_poll'] * 1000:g} ms sleep between "
        f"attempts, the PUT (botocore, straight to s3rver) starts a random 0-1.5 s after the "
        f"readers, and the time counts from its answer (a read before the answer counts 0). "
        f"{p['meta_uploads']} uploads. Peers: s3fs `{META_S3FS_OPTS}`, rclone mount `:s3:` "
        f"`{META_RCLONE_OPTS}`; tierfs defaults.",
        f"- 10b: {p['meta_keys']} 1-byte files in one directory under nginx's root; per run "
        f"and system: `echo 3 > drop_caches`, the source directory stat'ed again, a fresh "
        f"mount of the root, `LC_ALL=C ls -l DIR` timed, VmHWM after it (and VmHWM right after "
        f"mounting, for the rise); {p['meta_ls_runs']} interleaved runs, a system over "
        f"{p['meta_ls_timeout']} s is given up.",
        f"- 10c: `timeout={p['meta_hang_timeout']},retries=0,max_conns=32,metadata_ttl=600`; "
        f"directories k/ ({p['meta_hang_ops']} names) and u/00-u/31 listed and held open (so "
        f"dropping the kernel's dentries does not make tierfs forget their listings), a 16 MiB "
        f"object read with O_DIRECT; then drop_caches, every request stalls at the proxy, a "
        f"stat of u/NN/unknown in each of 32 threads, and, one at a time, a stat of each k/ "
        f"name and a 4 KiB O_DIRECT pread of the cached object; .tierfs/stats must show the "
        f"reads served and nothing fetched.",
        f"- 10c (stale): the same tree, `timeout={p['meta_hang_timeout']},retries=0,"
        f"max_conns=32,metadata_ttl=1`; k/ and u/00-u/31 listed and the object read, then "
        f"1.5 s so that every name, listing and version is past metadata_ttl (the kernel's "
        f"entries too: each stat is a LOOKUP); every request stalls at the proxy until the "
        f"end, a stat of u/NN/unknown in each of 32 threads (they wait for the stalled "
        f"refreshes), and {p['meta_hang_stale_ops']} rounds of: stat of a k/ name, ls u/NN, "
        f"cat .tierfs/stats, open + 4 KiB O_DIRECT pread + close of the object, spread over "
        f"{p['meta_hang_stale_seconds']:g} s at least. An operation over 2 s stops the rounds "
        f"(STUCK).",
    ]
    lines.append("")
    lines.append("## Machine")
    lines.append("")
    for k, v in machine.items():
        lines.append(f"- {k}: {v}")
    lines.append("")
    if b.notes:
        lines.append("## Notes")
        lines.append("")
        lines += [f"- {n}" for n in b.notes]
        lines.append("")
    (out / "results.md").write_text("\n".join(lines))
    b.raw["machine"] = machine
    b.raw["elapsed_s"] = elapsed
    b.raw["hwm"] = b.hwm
    b.raw["targets"] = [{"name": n, "value": v, "limit": lim, "kind": k}
                        for n, v, lim, k in targets]
    b.raw["table"] = [{"scenario": r[0], "tierfs": r[1], "cells": r[2], "target": r[3],
                       "met": r[4]} for r in rows]
    (out / "results.json").write_text(json.dumps(b.raw, indent=1, default=str))
    return "\n".join(lines)


def draw_chart(b, targets, seq):
    """results.png: left, figures of every system per scenario; right, each target as the
    measured value over its limit (bars at or past 1 meet it)."""
    out = b.out
    d = b.run_dir / "chart"
    d.mkdir(exist_ok=True)
    systems = [s for s in ["tierfs", "tierfs-s3", "nullfs", "curl", "curl-s3", "s3fs", "rclone",
                           "httpdirfs"] if s in seq]
    with open(d / "seq.dat", "w") as f:
        f.write("# system cold cached iops_k\n")
        for s in systems:
            cold = summarize(seq[s]["cold"])[0] or 0
            cached = summarize(seq[s]["cached"])[0] or 0
            iops = summarize([r["iops"] for r in seq[s]["rand"] if r])[0] or 0
            f.write(f"{s} {cold:.1f} {cached:.1f} {iops / 1000:.2f}\n")
    with open(d / "targets.dat", "w") as f:
        f.write("# target score\n")
        for name, v, lim, kind in targets:
            if v is None:
                sc = 0
            elif kind == "min":
                sc = v / lim
            elif kind == "max":
                sc = lim / v if v else 0
            else:  # band: 1 at the edge, more inside
                sc = 0.05 / max(abs(v - 1), 1e-3)
                sc = min(sc, 2.0)
            f.write(f"\"{name}\" {min(sc, 3.0):.3f}\n")
    gp = f"""
set terminal pngcairo size 1500,620 font "sans,10"
set output "{out / 'results.png'}"
set multiplot layout 1,2 title "tierfs benchmark ({'quick' if b.quick else 'full'}), medians of interleaved runs"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set key outside top center horizontal
set grid ytics
set bmargin 10
set rmargin 12
set xtics rotate by -30 scale 0
set ylabel "MB/s (sequential) / kIOPS (4 KiB random)"
set title "1-3: sequential MB/s, 4 KiB random kIOPS x100"
plot "{d / 'seq.dat'}" using 2:xtic(1) title "1 cold seq MB/s", \\
     "" using 3 title "2 cached seq MB/s", \\
     "" using ($4*100) title "3 random kIOPS x100"
set title "targets: measured / limit (>= 1 met; rate: 1 at +-5%)"
set ylabel "score"
set yrange [0:3.3]
set xtics rotate by -40
unset key
set style histogram clustered gap 1
plot "{d / 'targets.dat'}" using 2:xtic(1) title "score" lc rgb "#3a7dc9", \\
     "" using 0:2:(sprintf("%.2f", $2)) with labels offset 0,0.8 notitle, \\
     1 with lines lw 2 lc rgb "red" notitle
unset multiplot
"""
    (d / "chart.gp").write_text(gp)
    r = subprocess.run(["gnuplot", str(d / "chart.gp")], capture_output=True, text=True)
    if r.returncode != 0:
        log(f"gnuplot failed: {r.stderr[-1000:]}")
