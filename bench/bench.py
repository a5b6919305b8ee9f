#!/usr/bin/env python3
"""Run tierfs's benchmark suite: scripts/bench calls this. The suite is the package tierbench/
beside it, one module a scenario; tierbench/main.py says what each scenario measures."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tierbench.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
