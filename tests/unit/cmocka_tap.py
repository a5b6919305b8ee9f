#!/usr/bin/env python3
"""Run one cmocka test program and pass its TAP on, with its skips as TAP skips.

cmocka 1.1.5 reports a skip() as "not ok N # SKIP name", which meson's TAP reader counts as a
failure (TAP says a skip is "ok N # SKIP"). This rewrites those lines and nothing else, so a test
that calls skip() shows as SKIP in `meson test` instead of failing or passing in silence.

  cmocka_tap.py PROGRAM [ARGS...]   exits with the program's status (128 + N for a signal)
"""
import re
import subprocess
import sys

SKIP = re.compile(r'^not ok (\d+) # SKIP\b')


def main(argv):
    p = subprocess.Popen(argv[1:], stdout=subprocess.PIPE, text=True, errors='replace')
    for line in p.stdout:
        sys.stdout.write(SKIP.sub(r'ok \1 # SKIP', line))
        sys.stdout.flush()
    rc = p.wait()
    return 128 - rc if rc < 0 else rc


if __name__ == '__main__':
    sys.exit(main(sys.argv))
