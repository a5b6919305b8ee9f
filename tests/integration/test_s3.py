"""tierfs over the S3 API, on each S3 store of the suite (s3rver and Ceph RGW, the s3store
fixture): the tree and bytes, listing pagination (a directory of 1,100 keys), HEAD, ranged
GETs at odd offsets, ETag pinning, prefix mounts, and mount-time errors."""

import os

import pytest

import corpus
import harness
from harness import B64K, BUCKET, S3_ENV, s3_options

OPTS = ["block_size=64K"]


def s3_mount(mount, srv, url=f"s3://{BUCKET}", extra=()):
    return mount(url, OPTS + s3_options(srv) + list(extra), env=srv.env)


def test_s3_tree_and_content(mount, s3store):
    m = s3_mount(mount, s3store)
    files = corpus.assert_same_tree(m.mnt, s3store.view)
    assert len(os.listdir(m.path("many"))) == corpus.MANY  # two listing pages
    corpus.assert_same_content(m.mnt, s3store.view, files)


def test_s3_pread_odd_offsets(mount, s3store):
    m = s3_mount(mount, s3store)
    for rel in ["three-blocks-17.bin", "block-minus-1.bin", "names/plus+sign.bin",
                "dïr/ø ünï.log"]:
        corpus.assert_preads(m.mnt, s3store.view, rel, B64K)


def test_s3_mtime_is_last_modified(mount, s3store):
    m = s3_mount(mount, s3store)
    bad = []
    for key, (size, lm) in sorted(s3store.keys.items()):
        st = os.stat(m.path(key))
        if st.st_size != size or st.st_mtime_ns // 10**9 != lm:
            bad.append((key, size, lm, st.st_size, st.st_mtime_ns // 10**9))
    assert not bad, f"(key, size, LastModified) differ from the mount's stat: {bad[:10]}"


def test_s3_prefix_mount(mount, s3store):
    """s3://bucket/some/prefix shows what is under "some/prefix/", and not the sibling key
    "some/prefix-sibling.bin"."""
    src = s3store.view / "some" / "prefix"
    m = s3_mount(mount, s3store, url=f"s3://{BUCKET}/some/prefix")
    files = corpus.assert_same_tree(m.mnt, src)
    corpus.assert_same_content(m.mnt, src, files)


def _fails_with_one_line(args, mountpoint, timeout=60, env=S3_ENV):
    rc, _, err = harness.run_tierfs(args, env=env, timeout=timeout)
    if harness.mounted(mountpoint):
        harness.force_unmount(mountpoint)
        pytest.fail(f"{args}: exit status {rc}, and a mount was left")
    assert rc != 0, f"{args}: exit status 0 (stderr {err})"
    assert len(err) == 1 and err[0].strip(), f"{args}: want one line on stderr, got {err}"
    return err[0]


def test_s3_nonexistent_bucket_fails_at_mount(s3store, mountpoint, tierfs_bin):
    line = _fails_with_one_line(
        ["s3://no-such-bucket-tierfs", str(mountpoint), "-o", ",".join(s3_options(s3store))],
        mountpoint, env=s3store.env)
    assert "bucket" in line.lower(), f"the error does not say what is wrong: {line!r}"


def test_s3_nothing_listening_fails_at_mount(mountpoint, tierfs_bin):
    port = harness.free_port()
    opts = [f"endpoint=http://127.0.0.1:{port}", "path_style", "region=us-east-1"]
    _fails_with_one_line([f"s3://{BUCKET}", str(mountpoint), "-o", ",".join(opts)], mountpoint)
