#!/usr/bin/env python3
"""tierfs-sim's command line, run as a program: every mistake is one line on stderr starting
"tierfs-sim: " and exit status 2 (a file that is not a trace: 1); --generate writes traces that
a replay reads; --json prints one object that parses, with tiers.<name>.hit_ratio, store.gets
and store.bytes, and so does a sweep; --plot draws a PNG when gnuplot is there.

    sim_cli.py PATH/TO/tierfs-sim
TAP output, one line per check."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

SIM = sys.argv[1]
results = []


def run(*args):
    return subprocess.run([SIM, *args], capture_output=True, text=True, timeout=120)


def check(name, ok, detail=""):
    results.append((name, ok, detail))


def bad(name, args, status=2):
    p = run(*args)
    lines = p.stderr.splitlines()
    ok = p.returncode == status and len(lines) >= 1 and lines[0].startswith("tierfs-sim: ") \
        and not p.stdout
    # exactly one line, except "no trace" which adds the usage
    ok = ok and (len(lines) == 1 or "no trace" in lines[0])
    check(f"refuses {' '.join(args)!r} with one line, status {status}", ok,
          f"status {p.returncode}, stderr {p.stderr!r}, stdout {p.stdout[:200]!r}")


def main():
    work = tempfile.mkdtemp(prefix="sim_cli.")
    try:
        prefix = os.path.join(work, "g")
        junk = os.path.join(work, "junk")
        with open(junk, "w") as f:
            f.write("not a trace, not at all\n" * 4)
        bad("unknown", ["--bogus", "x"])
        bad("unknown short", ["-z", "x"])
        bad("no trace", [])
        bad("mount option", ["-o", "nonesuch=1", "x"])
        bad("too small", ["-o", "hot_size=1K", "x"])
        bad("secret", ["-o", "aws_secret_access_key=x", "x"])
        bad("duration", ["--store-latency=fast", "x"])
        bad("price", ["--get-price=-1", "x"])
        bad("sweep order", ["-o", "hot_size=1G:256M:x2", "x"])
        bad("sweep step", ["-o", "hot_size=256M:1G:x1", "x"])
        bad("two sweeps", ["-o", "hot_size=256M:1G:x2,lagging_size=8M:16M:x2", "x"])
        bad("plot without sweep", ["--plot=p.png", "x"])
        bad("generate and replay", [f"--generate={prefix}", "x"])
        bad("generate zero", [f"--generate={prefix}", "--mounts=0"])
        bad("a sweep by xF from 0", ["-o", "hot_size=0:1G:x2", junk])
        p = run("-o", "hot_size=0:1G:x2", junk)
        check("a sweep by xF from 0 says why (it said: more than 64 values)",
              "starts above 0" in p.stderr, p.stderr)
        bad("not a trace", [junk], status=1)
        bad("missing", [os.path.join(work, "nonesuch")], status=1)

        p = run(f"--generate={prefix}", "--mounts=2", "--partitions=3", "--duration=10m",
                "--replay-every=5m", "--replay-span=1h", "--json")
        gen = json.loads(p.stdout) if p.returncode == 0 else {}
        check("--generate writes two traces", p.returncode == 0 and gen.get("files") == 2
              and os.path.exists(prefix + "-001.trace"), p.stderr)
        traces = [prefix + "-000.trace", prefix + "-001.trace"]

        p = run("--json", "-o", "hot_ttl=600,shared=redis://127.0.0.1:1", *traces)
        try:
            j = json.loads(p.stdout)
            ok = (p.returncode == 0 and len(j["mounts"]) == 2
                  and all(k in j["tiers"] for k in ("hot", "lagging", "shared"))
                  and isinstance(j["tiers"]["hot"]["hit_ratio"], float)
                  and j["store"]["gets"] > 0 and j["store"]["bytes"] > 0
                  and j["reads"] == gen["reads"])
        except (ValueError, KeyError, TypeError) as e:
            ok, p.stderr = False, f"{e}: {p.stdout[:300]} {p.stderr}"
        check("--json parses, with tiers.<name>.hit_ratio, store.gets, store.bytes", ok,
              p.stderr)

        # mounts replayed apart (no shared=): an overload in the first stops the run, and the
        # report names only the mounts replayed (the others' names were NULL: a crash in JSON)
        p = run("--json", "--max-queued=1", "-o", "hot_ttl=600", *traces)
        try:
            j = json.loads(p.stdout)
            ok = j["overloaded"] is True and len(j["mounts"]) == 1
        except (ValueError, KeyError, TypeError) as e:
            ok, p.stderr = False, f"{e}: {p.returncode} {p.stdout[:300]} {p.stderr}"
        check("an overload replaying apart reports the mounts replayed", ok, p.stderr)

        # a trace its mount is still writing (or that died): the header's complete flag is
        # not set. One line says so; the reads it holds are replayed (issue 38: a live trace
        # once replayed to a hot hit ratio of 0.0, silently)
        p = run("-o", "hot_ttl=600", traces[0])
        check("a finished trace: no warning", p.returncode == 0 and p.stderr == "", p.stderr)
        live = os.path.join(work, "live.trace")
        data = bytearray(open(traces[0], "rb").read())
        data[56] = 0
        open(live, "wb").write(data[:len(data) - 17])  # a last record cut short, too
        p = run("--json", "-o", "hot_ttl=600", live)
        lines = p.stderr.splitlines()
        try:
            ok = (p.returncode == 0 and len(lines) == 1 and "is incomplete" in lines[0]
                  and live in lines[0] and json.loads(p.stdout)["incomplete_files"] == 1
                  and json.loads(p.stdout)["reads"] > 0)
        except (ValueError, KeyError) as e:
            ok, p.stderr = False, f"{e}: {p.stdout[:300]} {p.stderr}"
        check("a live trace: one line says it is incomplete, its reads replayed", ok,
              p.stderr)

        p = run("-o", "hot_ttl=600", *traces)
        check("text report", p.returncode == 0 and "fleet:" in p.stdout
              and "hit ratio" in p.stdout, p.stderr)

        p = run("--json", "-o", "hot_ttl=600,hot_size=32M:128M:x2", *traces)
        try:
            rows = json.loads(p.stdout)["sweep"]["rows"]
            ok = p.returncode == 0 and [r["value"] for r in rows] == [32 << 20, 64 << 20, 128 << 20]
        except (ValueError, KeyError, TypeError) as e:
            ok, p.stderr = False, f"{e}: {p.stdout[:300]} {p.stderr}"
        check("a sweep in JSON, one row per value", ok, p.stderr)

        p = run("-o", "hot_size=32M:128M:x2", *traces)
        check("a sweep as text: a header and three rows",
              p.returncode == 0 and len(p.stdout.splitlines()) == 4, p.stdout + p.stderr)

        if shutil.which("gnuplot"):
            png = os.path.join(work, "s.png")
            p = run(f"--plot={png}", "-o", "hot_size=32M:128M:x2", *traces)
            ok = p.returncode == 0 and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
            check("--plot draws a PNG", ok, p.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"1..{len(results)}")
    for i, (name, ok, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).splitlines()[:10]:
                print(f"# {line}")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
