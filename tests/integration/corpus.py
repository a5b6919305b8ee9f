"""The test corpus: a deterministic tree of objects, and the checks that compare a mount with it.

Every object's bytes come from random.Random seeded with (seed, relative path), so a failure
reproduces byte for byte, and an object's content does not depend on which other objects exist.

The tree holds, for a block size B: objects of 0 and 1 bytes, B-1, B, B+1 and 3B+17 bytes,
a few random sizes, awkward names (space, '+', '%', '~', non-ASCII), a deep prefix, a 1 MiB
object, an object no test reads, a deep prefix with an object at every level ("deep/..."), a directory of 1,100 small objects (more than one 1,000-key
S3 listing page), and "some/prefix/..." for prefix mounts next to a "some/prefix-sibling.bin"
that a prefix mount of "some/prefix" must not show.

"a/b/c/d/e/f/obj" is the only object under "a/": no level above it holds an object. s3rver
3.7.1 cannot list that ("a/" never appears as a CommonPrefix of a delimited listing of the
root, since its walk does not descend below a first level without objects), so the S3 bucket
holds the corpus without "a/" (see S3_EXCLUDE); file and HTTP mounts see all of it.
"""

import hashlib
import os
import random
from pathlib import Path

MANY = 1100
S3_EXCLUDE = ("a",)  # top-level entries left out of the S3 bucket (see above)
MIB = 1 << 20
# Most objects get a fixed old mtime (whole seconds plus a fraction, so a mount that rounds
# instead of truncating shows up); the ones under "recent/" keep the time they were written.
OLD_MTIME_NS = 1_700_000_000 * 10**9 + 600_000_000


def object_bytes(seed, rel, size):
    return random.Random(f"{seed}:{rel}").randbytes(size)


def layout(block_size, seed=1):
    """Return {relative path: size} of the corpus for @block_size."""
    b = block_size
    rng = random.Random(f"{seed}:sizes:{b}")
    objs = {
        "empty.bin": 0,
        "one.bin": 1,
        "block.bin": b,
        "block-minus-1.bin": b - 1,
        "block-plus-1.bin": b + 1,
        "three-blocks-17.bin": 3 * b + 17,
        "mib.bin": MIB,
        "untouched.bin": 3 * b,
        "names/with space.bin": b + 3,
        "names/plus+sign.bin": 777,
        "names/percent%20literal.bin": 2 * b - 5,
        "names/tilde~x.bin": 12,
        "dïr/ø ünï.log": b // 2 + 1,
        "a/b/c/d/e/f/obj": 2 * b + 1,
        "deep/top.bin": 3,
        "deep/l1/1.bin": 4,
        "deep/l1/l2/2.bin": 5,
        "deep/l1/l2/l3/3.bin": 6,
        "deep/l1/l2/l3/l4/obj": b + 11,
        "some/prefix/seg-00000000000000000000.log": 2 * b + 9,
        "some/prefix/seg-00000000000000000000.index": 31,
        "some/prefix/deeper/x y+z.bin": b - 7,
        "some/prefix-sibling.bin": 5,
    }
    for i in range(5):
        objs[f"random/r{i}.bin"] = rng.randrange(1, 5 * b)
    objs["recent/tail.log"] = rng.randrange(b, 3 * b)
    for i in range(MANY):
        objs[f"many/obj-{i:04d}.txt"] = rng.randrange(0, 200)
    return objs


def build(root, block_size, seed=1):
    """Write the corpus for @block_size under @root (created). Return {relpath: size}."""
    root = Path(root)
    objs = layout(block_size, seed)
    for rel, size in sorted(objs.items()):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(object_bytes(seed, rel, size))
        if not rel.startswith("recent/"):
            t = OLD_MTIME_NS + (hash_index(rel) % 86400) * 10**9
            os.utime(p, ns=(t, t))
    return objs


def hash_index(rel):
    return int.from_bytes(hashlib.sha256(rel.encode()).digest()[:4], "big")


def build_one(root, rel, size, seed=1):
    """Write one object of @size bytes at @root/@rel; return its path."""
    p = Path(root) / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "wb") as f:
        rng = random.Random(f"{seed}:{rel}")
        left = size
        while left:
            n = min(left, 8 * MIB)
            f.write(rng.randbytes(n))
            left -= n
    return p


def walk_tree(root):
    """Return ({relpath: size} of files, {relpath} of directories) under @root.

    Errors (a readdir or stat that fails) raise: os.walk would otherwise skip them silently.
    """

    def onerror(e):
        raise e

    files, dirs = {}, set()
    root = str(root)
    for d, subdirs, names in os.walk(root, onerror=onerror):
        rel_d = os.path.relpath(d, root)
        for s in subdirs:
            dirs.add(os.path.normpath(os.path.join(rel_d, s)))
        for n in names:
            p = os.path.join(d, n)
            st = os.stat(p)
            files[os.path.normpath(os.path.join(rel_d, n))] = st.st_size
    return files, dirs


def _diff(what, want, got, limit=15):
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    msg = []
    if missing:
        msg.append(f"{what} missing from the mount ({len(missing)}): {missing[:limit]}")
    if extra:
        msg.append(f"{what} in the mount but not in the source ({len(extra)}): {extra[:limit]}")
    return msg


def assert_same_tree(mnt, src):
    """The mount shows exactly the source's files (with their sizes) and directories."""
    want_f, want_d = walk_tree(src)
    got_f, got_d = walk_tree(mnt)
    msg = _diff("files", want_f, got_f) + _diff("directories", want_d, got_d)
    wrong = sorted(
        (r, want_f[r], got_f[r]) for r in set(want_f) & set(got_f) if want_f[r] != got_f[r]
    )
    if wrong:
        msg.append(f"sizes differ (path, source, mount) ({len(wrong)}): {wrong[:15]}")
    assert not msg, "\n".join(msg)
    return want_f


def sha256_file(path, chunk=256 * 1024):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def assert_same_content(mnt, src, rels):
    """sha256 of every file in @rels read through the mount equals the source's."""
    bad = []
    for rel in sorted(rels):
        want = sha256_file(os.path.join(src, rel))
        try:
            got = sha256_file(os.path.join(mnt, rel))
        except OSError as e:
            bad.append((rel, f"{type(e).__name__}: {e}"))
            continue
        if got != want:
            bad.append((rel, "sha256 differs"))
    assert not bad, f"{len(bad)} of {len(rels)} files differ through the mount: {bad[:15]}"


def pread_full(fd, n, off):
    """pread until @n bytes or end of file (a short read is legal, e.g. with direct_io)."""
    out = bytearray()
    while len(out) < n:
        b = os.pread(fd, n - len(out), off + len(out))
        if not b:
            break
        out += b
    return bytes(out)


def odd_ranges(size, block_size, rng, extra=40):
    """(offset, length) pairs around block boundaries, plus @extra random ones."""
    b = block_size
    offs = {0, 1, b - 1, b, b + 1, 2 * b - 3, 3 * b, 3 * b + 16, size - 1, size, size + 100}
    lens = [1, 2, 3, 17, b - 1, b, b + 2, 2 * b + 5, size]
    out = [(o, n) for o in sorted(offs) if o >= 0 for n in lens]
    for _ in range(extra):
        o = rng.randrange(0, size + 1)
        out.append((o, rng.randrange(1, 3 * b)))
    return out


def assert_preads(mnt, src, rel, block_size, seed=7):
    """Reads at odd offsets and lengths across block boundaries equal the source's slices."""
    data = Path(src, rel).read_bytes()
    rng = random.Random(f"{seed}:{rel}")
    bad = []
    fd = os.open(os.path.join(mnt, rel), os.O_RDONLY)
    try:
        for off, n in odd_ranges(len(data), block_size, rng):
            got = pread_full(fd, n, off)
            if got != data[off : off + n]:
                bad.append((off, n, len(got)))
    finally:
        os.close(fd)
    assert not bad, f"{rel}: pread (offset, length, got bytes) differ from source: {bad[:10]}"
