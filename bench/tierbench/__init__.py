"""tierfs's benchmark suite, run by scripts/bench through bench/bench.py: common.py (helpers,
servers, mounts), core.py (the Bench's state), one module a scenario (seq, multi, isolation,
rate, memory, broker, meta, lagrand, disk, shared, mac, trace, sim, write), report.py, and
main.py (the options and the order of the scenarios). See main.py for what each measures."""
