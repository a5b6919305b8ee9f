"""tierfs over the S3 API, on each S3 store of the suite (s3rver and Ceph RGW, the s3store
fixture): the tree and bytes, listing pagination (a directory of 1,100 keys), HEAD, ranged
GETs at odd offsets, ETag pinning, prefix mounts, and mount-time errors."""

import errno
import hashlib
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


def test_s3_any_region_is_signed_and_accepted(mount, s3store):
    """region= names the SigV4 scope only: Ceph RGW (and s3rver) accept any region in the
    signature, so a mount with a region the store has never heard of reads as any other."""
    m = s3_mount(mount, s3store, extra=["region=xx-nowhere-7"])
    corpus.assert_preads(m.mnt, s3store.view, "three-blocks-17.bin", B64K)


def test_s3_an_ip_endpoint_takes_the_bucket_in_the_path(mount, s3store):
    """As a new user of a self-hosted store mounts it: endpoint= alone, neither path_style nor
    region=. A bucket cannot be in the name of an IP address ("tierfs-test.127.0.0.1"): the
    old code failed the mount with "Could not resolve host"; such an endpoint now takes the
    bucket in the path, as botocore does."""
    m = mount(f"s3://{BUCKET}", OPTS + [f"endpoint={s3store.endpoint}"], env=s3store.env)
    corpus.assert_preads(m.mnt, s3store.view, "three-blocks-17.bin", B64K)
    assert len(os.listdir(m.path("many"))) == corpus.MANY


def test_s3_etag_pinning(mount, s3store):
    """A file open across the replacement of its object never reads a byte of the new one:
    the first block (cached) reads old bytes, a block not cached is ESTALE. RGW answers 412 to
    the range GET's If-Match; s3rver ignores If-Match, and its answer's ETag gives the change
    away."""
    c = s3store.client()
    key = "pin/x.bin"
    old, new = hashlib.shake_256(b"old").digest(8 * B64K), hashlib.shake_256(b"new").digest(
        8 * B64K)
    c.put_object(Bucket=BUCKET, Key=key, Body=old)
    try:
        m = s3_mount(mount, s3store, extra=["readahead=0"])
        fd = os.open(m.path(key), os.O_RDONLY)
        try:
            assert os.pread(fd, 4096, 0) == old[:4096]
            c.put_object(Bucket=BUCKET, Key=key, Body=new)
            with pytest.raises(OSError) as e:
                os.pread(fd, 4096, 7 * B64K)
            assert e.value.errno == errno.ESTALE
            assert os.pread(fd, 4096, 0) == old[:4096]
        finally:
            os.close(fd)
    finally:
        c.delete_object(Bucket=BUCKET, Key=key)


def _write(path, payload, chunk=1 << 20):
    os.makedirs(os.path.dirname(path), exist_ok=True)  # lives in the mount until written
    f = open(path, "wb")
    for i in range(0, len(payload), chunk):
        f.write(payload[i:i + chunk])
    f.flush()
    return f


def test_s3_a_name_taken_during_a_multipart_write_is_eexist(mount, s3store):
    """Without allow_overwrite, a name another client (botocore) creates while a file of
    several parts is written through the mount makes close() fail with EEXIST, and the other
    client's object stays as it was. Ceph RGW 16 ignores If-None-Match on
    CompleteMultipartUpload: before the HEAD that now precedes Complete, close() returned 0
    and the object was replaced by ours. (The writer holds the file open, so this race needs
    no shim; test_upload_backend.py has the same at the backend.)"""
    c = s3store.client()
    key = "race/r.bin"
    m = s3_mount(mount, s3store, extra=["allow_write", "part_size=5M", "block_size=1M"])
    try:
        f = _write(m.path(key), hashlib.shake_256(b"ours").digest(12 << 20))
        c.put_object(Bucket=BUCKET, Key=key, Body=b"theirs")
        with pytest.raises(OSError) as e:
            f.close()
        assert e.value.errno == errno.EEXIST
        assert c.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"theirs"
        if s3store.kind == "rgw":  # s3rver does not list uploads (501)
            ups = c.list_multipart_uploads(Bucket=BUCKET, Prefix="race/").get("Uploads", [])
            assert not ups, f"the refused upload was not aborted: {ups}"
        # the plain twin: the name stays free, and the same write closes with success
        small = _write(m.path("race/free.bin"), hashlib.shake_256(b"f").digest(11 << 20))
        small.close()
        got = c.get_object(Bucket=BUCKET, Key="race/free.bin")["Body"].read()
        assert got == hashlib.shake_256(b"f").digest(11 << 20)
    finally:
        for k in (key, "race/free.bin"):
            c.delete_object(Bucket=BUCKET, Key=k)


def test_s3_complete_after_an_abort_is_eio(mount, rgw):
    """The multipart upload of a file still open is aborted by another client (a lifecycle
    rule, an operator): RGW then answers CompleteMultipartUpload with 500 ("This multipart
    completion is already in progress"), every retry too. close() fails with EIO (after the
    default 3 retries, under a second of backoff), no object appears, and the mount writes the
    next file."""
    c = rgw.client()
    key = "abort/a.bin"
    m = s3_mount(mount, rgw, extra=["allow_write", "part_size=5M", "block_size=1M"])
    try:
        f = _write(m.path(key), hashlib.shake_256(b"a").digest(10 << 20))  # two full parts

        def parts_in():
            ups = c.list_multipart_uploads(Bucket=BUCKET, Prefix="abort/").get("Uploads", [])
            if not ups:
                return None
            n = len(c.list_parts(Bucket=BUCKET, Key=key, UploadId=ups[0]["UploadId"]).get(
                "Parts", []))
            return ups[0]["UploadId"] if n == 2 else None

        upload_id = harness.wait_until(parts_in, 60, "both parts at the store")
        c.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload_id)
        with pytest.raises(OSError) as e:
            f.close()
        assert e.value.errno == errno.EIO
        assert c.list_objects_v2(Bucket=BUCKET, Prefix="abort/").get("KeyCount", 0) == 0
        assert not os.path.exists(m.path(key))
        _write(m.path("abort/next.bin"), b"next").close()
        assert c.get_object(Bucket=BUCKET, Key="abort/next.bin")["Body"].read() == b"next"
    finally:
        for k in (key, "abort/next.bin"):
            c.delete_object(Bucket=BUCKET, Key=k)


def test_rgw_kill_and_restart(rgw):
    """rgw.py's fault injection, which the soak uses: kill() ends radosgw alone (the port
    refuses), restart() brings it back on the same endpoint with the bucket intact; every
    daemon it started is one of its own."""
    import botocore.exceptions

    endpoint = rgw.endpoint
    c = rgw.client()
    c.put_object(Bucket=BUCKET, Key="restart/k", Body=b"k")
    try:
        rgw.kill()
        assert not harness.port_open(rgw.port)
        with pytest.raises(botocore.exceptions.EndpointConnectionError):
            rgw.client().head_object(Bucket=BUCKET, Key="restart/k")
        rgw.restart()
        assert rgw.endpoint == endpoint
        assert rgw.client().get_object(Bucket=BUCKET, Key="restart/k")["Body"].read() == b"k"
        assert set(rgw.procs) == {"mon.a", "osd.0", "rgw"}
    finally:
        if "rgw" not in rgw.procs:
            rgw.restart()
        rgw.client().delete_object(Bucket=BUCKET, Key="restart/k")
