"""backend/'s write interface without FUSE: upload_driver (tests/integration/upload_driver.c,
built beside tierfs in tests/) calls backend_upload_* and friends against s3rver and Ceph RGW
(conftest.py's rgw fixture), against the tests' own fake S3 (fakes3.py: every request seen and
its signature checked, AbortMultipartUpload, If-None-Match, injected faults) and against file://
directories, and the bytes are checked from outside (botocore, the fake's store, the
directory).

Object bytes are SHAKE256(seed) cut to the size, on both sides. Parts are 5 MiB (S3's
smallest) so that multipart objects stay small."""

import base64
import fcntl
import hashlib
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import harness
from fakes3 import MIB, FakeS3, faults

PART = 5 * MIB


def data(seed, size):
    return hashlib.shake_256(seed.encode()).digest(size)


def driver_bin():
    d = os.environ.get("TIERFS_UPLOAD_DRIVER") or \
        str(Path(harness.tierfs_bin()).parent / "tests" / "upload_driver")
    if not os.access(d, os.X_OK):
        pytest.fail(f"upload_driver not found at {d} (build it, or set TIERFS_UPLOAD_DRIVER)")
    return d


def parse(line):
    """'put ok size=3 etag="x"' -> ('put', 'ok', {'size': '3', 'etag': '"x"'})."""
    words = line.split()
    kv = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    return words[0], words[1] if len(words) > 1 else "", kv


def drive(url, *cmds, opts=(), env=None, timeout=120):
    """Run the driver; return its output lines after "writable ..." (one or more per command)."""
    p = subprocess.run([driver_bin(), *opts, url, *cmds], capture_output=True, text=True,
                       env=harness.clean_env(env), timeout=timeout)
    assert p.returncode == 0, f"upload_driver exited {p.returncode}: {p.stderr}"
    lines = p.stdout.splitlines()
    assert lines and lines[0].startswith("writable "), p.stdout
    return lines


def stats_of(lines):
    for line in lines:
        if line.startswith("stats "):
            return {k: int(v) for k, v in parse(line)[2].items()}
    raise AssertionError(f"no stats line in {lines}")


def puts(lines):
    return [parse(x) for x in lines if x.startswith("put ")]


# ---------------------------------------------------------------------------------------------
# S3: the fake


@pytest.fixture
def fake():
    f = FakeS3().start()
    yield f
    f.stop()


FAKE_ENV = {"AWS_ACCESS_KEY_ID": FakeS3.KEY, "AWS_SECRET_ACCESS_KEY": FakeS3.SECRET}


def fdrive(fake, *cmds, retries=3, timeout=10):
    return drive(f"s3://{FakeS3.BUCKET}/pre", *cmds, env=FAKE_ENV,
                 opts=[f"--endpoint={fake.endpoint}", "--path-style", f"--retries={retries}",
                       f"--timeout={timeout}"])


def assert_all_signed(fake):
    """Every request's signature checked out, and every body went as UNSIGNED-PAYLOAD with its
    Content-MD5 signed (the fake refuses one without), no body as the empty body's SHA-256."""
    bad = [(r.op, r.status) for r in fake.records if not r.signed]
    assert not bad, f"requests whose SigV4 or payload hash did not check: {bad}"
    empty = hashlib.sha256(b"").hexdigest()
    for r in fake.records:
        want = "UNSIGNED-PAYLOAD" if r.op in ("put", "part", "complete") else empty
        assert r.headers.get("x-amz-content-sha256") == want, (r.op, r.headers)
        if want != empty:
            assert "content-md5" in r.headers["authorization"].split("SignedHeaders=")[1]


def test_small_object_is_one_putobject(fake):
    """An object of one part (smaller than, or exactly, part_size) is ONE signed PutObject with
    the body's Content-MD5, signed (its payload UNSIGNED-PAYLOAD: the MD5 checks the bytes):
    no multipart upload in the store."""
    out = fdrive(fake, "put small.bin 100K s1", f"put exact.bin {PART} s2 part={PART}",
                 "stats")
    (_, ok1, kv1), (_, ok2, kv2) = puts(out)
    assert ok1 == ok2 == "ok", out
    assert fake.ops() == ["put", "put"]
    assert fake.objects["pre/small.bin"].data == data("s1", 100 * 1024)
    assert fake.objects["pre/exact.bin"].data == data("s2", PART)
    assert kv1["etag"] == f'"{hashlib.md5(data("s1", 100 * 1024)).hexdigest()}"'
    assert all("content-md5" in r.headers and "if-none-match" in r.headers
               for r in fake.records)
    assert_all_signed(fake)
    st = stats_of(out)
    assert st["uploads_completed"] == 2 and st["parts"] == 2
    assert st["bytes_up"] == 100 * 1024 + PART


def test_multipart_requests_and_etag(fake):
    """Two parts or more: Create, one UploadPart per part, Complete; the ETag answered is S3's
    (MD5 of the parts' MD5s, "-N"); nothing left in progress; the bytes read back through the
    backend's own range reads, with If-Match on that ETag."""
    size = 3 * PART + 12345
    fake.add_rule("create", faults.delay(1))  # parts 1-3 wait for it: the window fills
    out = fdrive(fake, f"put big.bin {size} s3 part={PART} inflight=3 probe",
                 f"read big.bin {size} s3", "stats")
    assert "probe EAGAIN" in out, out
    (_, ok, kv), = puts(out)
    assert ok == "ok" and kv["size"] == str(size) and kv["parts"] == "4", out
    assert "read match" in out
    ops = fake.ops()  # the HEAD before Complete: is the name still free? (no overwrite)
    assert ops[0] == "create" and ops[5:7] == ["head", "complete"]
    assert sorted(ops[1:5]) == ["part"] * 4
    assert sorted(r.part for r in fake.records if r.op == "part") == [1, 2, 3, 4]
    obj = fake.objects["pre/big.bin"]
    assert obj.data == data("s3", size)
    assert kv["etag"] == obj.etag and obj.etag.endswith('-4"')
    assert not fake.uploads and not fake.aborted
    assert_all_signed(fake)
    st = stats_of(out)
    assert st["parts"] == 4 and st["bytes_up"] == size and st["upload_retries"] == 0


@pytest.mark.parametrize("fault", [
    faults.status(500), faults.status(503, "SlowDown"), faults.reset(),
    faults.status(400, "BadDigest"), faults.status(400, "XAmzContentSHA256Mismatch"),
    faults.bad_etag()], ids=lambda f: "-".join(map(str, f)))
def test_part_failing_once_is_retried(fake, fault):
    """A part that fails once (a 5xx, a reset, bytes S3 says were damaged, an ETag that is not
    the MD5 of what was sent) goes again, whole, and the object is right."""
    rule = fake.add_rule("part", fault, part=2)
    out = fdrive(fake, f"put r.bin {2 * PART + 7} s4 part={PART}", "stats")
    (_, ok, _), = puts(out)
    assert ok == "ok", out
    assert rule.hits == 1
    assert fake.objects["pre/r.bin"].data == data("s4", 2 * PART + 7)
    assert [r.part for r in fake.records if r.op == "part"].count(2) == 2
    # a reset on a kept-alive connection is resent by curl itself, unseen by the count
    assert stats_of(out)["upload_retries"] == 1 or fault == faults.reset()


def test_putobject_failing_once_is_retried(fake):
    """PutObject (a small object) goes again, whole, after a reset and a 503 SlowDown. (The
    reset comes first, on a new connection: on a kept-alive one curl would resend the request
    by itself, unseen by the retry count.)"""
    fake.add_rule("put", faults.reset())
    fake.add_rule("put", faults.status(503, "SlowDown"))
    out = fdrive(fake, "put p.bin 3000 p1", "stats")
    (_, ok, _), = puts(out)
    assert ok == "ok", out
    assert fake.ops() == ["put", "put", "put"]
    assert fake.objects["pre/p.bin"].data == data("p1", 3000)
    assert stats_of(out)["upload_retries"] == 2


def test_part_hanging_is_retried_after_the_timeout(fake):
    """A part whose answer never comes is cut off after `timeout` and sent again."""
    fake.add_rule("part", faults.hang(30), part=1)
    t0 = time.monotonic()
    out = fdrive(fake, f"put h.bin {PART + 1} s5 part={PART}", "stats", timeout=2)
    (_, ok, _), = puts(out)
    assert ok == "ok", out
    assert 2 <= time.monotonic() - t0 < 25
    assert fake.objects["pre/h.bin"].data == data("s5", PART + 1)


def test_part_failing_for_good_aborts(fake):
    """A part that keeps failing fails its done and the commit; the multipart upload is
    aborted: no object, no upload left in the store."""
    fake.add_rule("part", faults.status(500), times=None, part=3)
    out = fdrive(fake, f"put f.bin {3 * PART} s6 part={PART}", "stats", retries=1)
    (_, res, kv), = puts(out)
    assert res.startswith("err=-5"), out
    assert kv["parts_failed"] == "1"
    assert "pre/f.bin" not in fake.objects and not fake.uploads
    assert len(fake.aborted) == 1 and fake.ops()[-1] == "abort"
    st = stats_of(out)
    assert st["uploads_failed"] == 1 and st["uploads_aborted"] == 1 and st["abort_errors"] == 0


def test_complete_failing_aborts(fake):
    """Complete refused (every attempt): the commit gets EIO, the upload is aborted, and the
    name stays free."""
    fake.add_rule("complete", faults.status(500), times=None)
    out = fdrive(fake, f"put c.bin {2 * PART} s7 part={PART}", "stats", retries=2)
    (_, res, _), = puts(out)
    assert res.startswith("err=-5"), out
    assert fake.ops().count("complete") == 3 and fake.ops()[-1] == "abort"
    assert "pre/c.bin" not in fake.objects and not fake.uploads


def test_complete_200_with_error_is_retried(fake):
    """S3 may answer Complete with a 200 whose body is an <Error>: that is a failure, tried
    again; once it succeeds, the object is there."""
    rule = fake.add_rule("complete", faults.error200("InternalError"))
    out = fdrive(fake, f"put e.bin {2 * PART} s8 part={PART}")
    (_, ok, kv), = puts(out)
    assert ok == "ok" and rule.hits == 1, out
    assert fake.objects["pre/e.bin"].etag == kv["etag"]


def test_complete_200_with_error_for_good_aborts(fake):
    fake.add_rule("complete", faults.error200("InternalError"), times=None)
    out = fdrive(fake, f"put e.bin {2 * PART} s8 part={PART}", retries=1)
    (_, res, _), = puts(out)
    assert res.startswith("err=-5"), out
    assert "pre/e.bin" not in fake.objects and len(fake.aborted) == 1


def test_abort_by_the_caller(fake):
    """backend_upload_abort after three parts: they finish, then AbortMultipartUpload."""
    out = fdrive(fake, f"put a.bin {4 * PART} s9 part={PART} abort=3",
                 "wait-stat uploads_aborted 1", "stats")
    assert any(x.startswith("put aborted parts=3") for x in out), out
    assert fake.ops()[-1] == "abort" and len(fake.aborted) == 1 and not fake.uploads
    assert "pre/a.bin" not in fake.objects
    assert stats_of(out)["abort_errors"] == 0


def test_abort_of_a_held_part_sends_nothing(fake):
    """Aborted after one part, which was held back: the store never heard of the upload."""
    out = fdrive(fake, f"put a.bin {2 * PART} s9 part={PART} abort=1",
                 "wait-stat uploads_aborted 1")
    assert any(x.startswith("put aborted parts=1 parts_failed=1") for x in out), out
    assert fake.ops() == []


def test_overwrite_refused_with_if_none_match(fake):
    """Without overwrite, PutObject and Complete carry If-None-Match: * and an existing name is
    -EEXIST (the multipart upload then aborted), the object untouched; with it, replaced."""
    fake.put_object("pre/x.bin", b"old")
    out = fdrive(fake, "put x.bin 10 n1", f"put x.bin {2 * PART} n2 part={PART}",
                 "put x.bin 10 n3 overwrite")
    r1, r2, r3 = puts(out)
    assert r1[1].startswith("err=-17") and r2[1].startswith("err=-17"), out
    assert r3[1] == "ok", out
    assert fake.objects["pre/x.bin"].data == data("n3", 10)
    assert len(fake.aborted) == 1 and not fake.uploads
    last_put = [r for r in fake.records if r.op == "put"][-1]
    assert "if-none-match" not in last_put.headers


def test_complete_without_an_etag_learns_it_by_head(fake):
    """Complete answered with an empty <ETag></ETag> (Ceph RGW 16) is a success: a HEAD after
    it finds the ETag our parts make, and that is the upload's; Complete is sent once. (The
    old code took the answer for a broken one and sent Complete again.)"""
    fake.add_rule("complete", faults.rgw16())
    out = fdrive(fake, f"put e.bin {2 * PART} e1 part={PART}", "stats")
    (_, ok, kv), = puts(out)
    assert ok == "ok", out
    assert fake.ops() == ["create", "part", "part", "head", "complete", "head"]
    assert kv["etag"] == fake.objects["pre/e.bin"].etag and kv["etag"].endswith('-2"')
    assert stats_of(out)["upload_retries"] == 0


@pytest.mark.parametrize("status", [403, 500])
def test_the_head_before_complete_failing(fake, status):
    """The HEAD before Complete refused with 403 (credentials that may write but not read):
    Complete goes on, guarded by If-None-Match alone, and the object is made. Failing with a
    5xx through every retry: the upload ends with EIO and is aborted, no object."""
    fake.add_rule("head", faults.status(status, "AccessDenied" if status == 403 else
                                       "InternalError"), times=None)
    out = fdrive(fake, f"put h.bin {2 * PART} h1 part={PART}", retries=1)
    (_, res, _), = puts(out)
    if status == 403:
        assert res == "ok", out
        assert fake.objects["pre/h.bin"].data == data("h1", 2 * PART)
        assert "if-none-match" in [r for r in fake.records if r.op == "complete"][0].headers
    else:
        assert res.startswith("err=-5"), out
        assert "pre/h.bin" not in fake.objects and len(fake.aborted) == 1


def _taken_during_complete(fake, key):
    """Put @key at the fake once a Complete for it has arrived (and waits at its gate), then
    open the gate."""
    gate = threading.Event()

    def other_client():
        try:
            harness.wait_until(lambda: any(r.op == "complete" for r in fake.records), 30,
                               "the Complete")
            fake.put_object(key, b"theirs")
        finally:
            gate.set()

    t = threading.Thread(target=other_client, daemon=True)
    t.start()
    return gate, t


@pytest.mark.parametrize("store", ["honours", "rgw16"])
def test_a_name_taken_between_the_head_and_complete(fake, store):
    """The window the HEAD before Complete leaves, held open: another client creates the name
    after that HEAD, while Complete is on its way (the Complete waits at a gate until it has).
    A store that honours If-None-Match on Complete (AWS S3, the fake) refuses it: EEXIST, the
    other object intact. One that ignores it (Ceph RGW 16) replaces the other object, and the
    upload succeeds: this is the window docs/semantics.md names. (The plain twin, the name
    taken before the HEAD, is test_overwrite_refused_with_if_none_match.)"""
    gate, t = _taken_during_complete(fake, "pre/w.bin")
    fake.add_rule("complete", faults.gate(gate) if store == "honours" else faults.rgw16(gate))
    out = fdrive(fake, f"put w.bin {2 * PART} w1 part={PART}")
    t.join(30)
    (_, res, _), = puts(out)
    assert fake.ops()[:5] == ["create", "part", "part", "head", "complete"]
    if store == "honours":
        assert res.startswith("err=-17"), out
        assert fake.objects["pre/w.bin"].data == b"theirs" and len(fake.aborted) == 1
    else:
        assert res == "ok", out
        assert fake.objects["pre/w.bin"].data == data("w1", 2 * PART)


@pytest.mark.parametrize("op", ["put", "complete"])
def test_lost_answer_then_412_or_404_is_checked_by_head(fake, op):
    """The store did the write but its answer was lost: the retry gets 412 (If-None-Match, the
    object is there now) or 404 NoSuchUpload (Complete already done). A HEAD finds our ETag:
    the upload succeeded, and is reported so."""
    fake.add_rule(op, faults.lose_answer())
    size = 100 if op == "put" else 2 * PART
    out = fdrive(fake, f"put l.bin {size} l1 part={PART}")
    (_, ok, kv), = puts(out)
    assert ok == "ok", out
    assert fake.ops()[-1] == "head"
    assert kv["etag"] == fake.objects["pre/l.bin"].etag
    assert fake.objects["pre/l.bin"].data == data("l1", size)


@pytest.mark.parametrize("how", ["stop", "stop-after-commit"])
def test_stopping_with_parts_in_flight(fake, how):
    """The backend stops while parts are in flight (each answer delayed): every part's done
    and the commit's come, with errors, nothing is left half-done in the driver, and no
    object appears. (Run under ASan/TSan, this is the shutdown path's memory check.)"""
    fake.add_rule("part", faults.delay(2), times=None)
    out = fdrive(fake, f"put s.bin {3 * PART} s1 part={PART} {how}")
    (_, res, kv), = puts(out)
    if how == "stop":
        assert res == "stopped" and kv["parts_failed"] == "3", out
    else:
        assert res.startswith("err=-"), out
    assert "pre/s.bin" not in fake.objects


def test_unlink_rename_mkdir(fake):
    """DeleteObject; rename is EXDEV (S3 has none); directories need nothing in the store."""
    fake.put_object("pre/d/o.bin", b"x")
    out = fdrive(fake, "unlink d/o.bin", "rename d/a d/b", "mkdir d/sub", "rmdir d/sub")
    assert out[1:] == ["unlink ok", "rename err=-18 EXDEV", "mkdir ok", "rmdir ok"]
    assert fake.ops() == ["delete"] and not fake.objects


# ---------------------------------------------------------------------------------------------
# S3: the real stores, s3rver and Ceph RGW (bucket "upload" in each)


@pytest.fixture(scope="module")
def s3rver(tmp_path_factory):
    srv = harness.S3rver(tmp_path_factory.mktemp("s3rver-up"))
    try:
        srv.start()
        srv.client().create_bucket(Bucket="upload")
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def rgw_up(rgw):
    """The session's Ceph RGW (conftest.py) with a bucket "upload" of its own."""
    rgw.make_bucket("upload")
    return rgw


@pytest.fixture(params=["s3rver", "rgw"])
def store(request):
    return request.getfixturevalue("s3rver" if request.param == "s3rver" else "rgw_up")


def sdrive(srv, *cmds, opts=()):
    return drive("s3://upload", *cmds, env=srv.env,
                 opts=[f"--endpoint={srv.endpoint}", "--path-style", *opts])


def uploads_in_progress(c, bucket="upload"):
    return [(u["Key"], u["UploadId"]) for u in
            c.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def test_small_and_multipart(store):
    """A small object and a multipart one, read back with botocore; no request tried twice.
    Ceph RGW answers CompleteMultipartUpload with an empty <ETag></ETag>: the ETag is then
    learnt by a HEAD (the multipart ETag our parts make), not by retrying a Complete that
    succeeded (the old code took the empty ETag for a broken answer and sent Complete again)."""
    size = 2 * PART + 99
    out = sdrive(store, "put s.bin 1000 t1", f"put m.bin {size} t2 part={PART} inflight=2",
                 f"read m.bin {size} t2", "stats")
    (_, ok1, kv1), (_, ok2, kv2) = puts(out)
    assert ok1 == ok2 == "ok" and "read match" in out, out
    c = store.client()
    for key, seed, n, kv in (("s.bin", "t1", 1000, kv1), ("m.bin", "t2", size, kv2)):
        o = c.get_object(Bucket="upload", Key=key)
        assert o["Body"].read() == data(seed, n)
        assert o["ETag"] == kv["etag"]
    if store.kind == "rgw":  # s3rver names a multipart object by one MD5
        assert kv2["etag"].endswith('-3"'), kv2
    assert stats_of(out)["upload_retries"] == 0, out


def test_the_store_refuses_a_body_that_is_not_its_content_md5(store):
    """tierfs sends a body as UNSIGNED-PAYLOAD with its Content-MD5 signed, so the store's check
    of that MD5 is what refuses bytes damaged on the way (docs/semantics.md). Pinned on each
    store: on RGW, a PutObject and an UploadPart whose Content-MD5 is another body's get 400
    BadDigest and store nothing; the same requests with their own MD5 are taken (the twin).
    s3rver checks no Content-MD5 (nor a signature): it takes the PutObject, and its ETag is the
    MD5 of what it stored, which is how tierfs's ETag check catches damage there."""
    from botocore.exceptions import ClientError

    c = store.client()
    body, other = os.urandom(1000), os.urandom(1000)

    def md5(b):
        return base64.b64encode(hashlib.md5(b).digest()).decode()

    def code(fn):
        try:
            fn()
        except ClientError as e:
            return e.response["Error"]["Code"]
        return None

    if store.kind == "s3rver":
        r = c.put_object(Bucket="upload", Key="bd.bin", Body=body, ContentMD5=md5(other))
        assert r["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
        c.delete_object(Bucket="upload", Key="bd.bin")
        return
    assert code(lambda: c.put_object(Bucket="upload", Key="bd.bin", Body=body,
                                     ContentMD5=md5(other))) == "BadDigest"
    assert code(lambda: c.head_object(Bucket="upload", Key="bd.bin")) in ("404", "NoSuchKey")
    uid = c.create_multipart_upload(Bucket="upload", Key="bdm.bin")["UploadId"]
    try:
        assert code(lambda: c.upload_part(Bucket="upload", Key="bdm.bin", UploadId=uid,
                                          PartNumber=1, Body=body,
                                          ContentMD5=md5(other))) == "BadDigest"
        assert not c.list_parts(Bucket="upload", Key="bdm.bin", UploadId=uid).get("Parts")
        c.upload_part(Bucket="upload", Key="bdm.bin", UploadId=uid, PartNumber=1, Body=body,
                      ContentMD5=md5(body))
    finally:
        c.abort_multipart_upload(Bucket="upload", Key="bdm.bin", UploadId=uid)
    c.put_object(Bucket="upload", Key="bd.bin", Body=body, ContentMD5=md5(body))
    assert c.get_object(Bucket="upload", Key="bd.bin")["Body"].read() == body
    c.delete_object(Bucket="upload", Key="bd.bin")


def test_s3rver_ignores_if_none_match_and_refuses_abort(s3rver):
    """What s3rver 3 does with the write path's conditions, pinned so a change shows: it
    overwrites despite If-None-Match: * (AWS S3 answers 412), and answers
    AbortMultipartUpload 405 (counted as an abort error; the lifecycle rule cleans up)."""
    out = sdrive(s3rver, "put o.bin 10 u1", "put o.bin 10 u2",
                 f"put ab.bin {3 * PART} u3 part={PART} abort=2", "wait-stat uploads_aborted 1",
                 "stats")
    r1, r2, _ = puts(out)
    assert r1[1] == r2[1] == "ok", out
    c = s3rver.client()
    assert c.get_object(Bucket="upload", Key="o.bin")["Body"].read() == data("u2", 10)
    assert stats_of(out)["abort_errors"] == 1
    # the abandoned upload made no object (its parts stay in s3rver's upload area)
    keys = [o["Key"] for o in c.list_objects_v2(Bucket="upload").get("Contents", [])]
    assert "ab.bin" not in keys


def test_an_existing_name_is_refused_by_put_and_by_multipart(store):
    """Without overwrite, an existing name is EEXIST for a multipart upload on both stores, and
    for a PutObject on RGW (412 to If-None-Match: *; s3rver ignores the header, test above).
    RGW 16 ignores If-None-Match on
    CompleteMultipartUpload (the old code closed with success and replaced the object), so a
    HEAD just before Complete finds the name taken. The object is left as it was, the upload
    aborted (none left in progress on RGW); with overwrite, the multipart upload replaces it."""
    c = store.client()
    c.put_object(Bucket="upload", Key="taken.bin", Body=b"theirs")
    out = sdrive(store, f"put taken.bin {2 * PART} n2 part={PART}", "stats")
    (_, res, _), = puts(out)
    assert res.startswith("err=-17"), out
    assert c.get_object(Bucket="upload", Key="taken.bin")["Body"].read() == b"theirs"
    if store.kind == "rgw":
        out = sdrive(store, "put taken.bin 10 n1")
        (_, res, _), = puts(out)
        assert res.startswith("err=-17"), out  # 412 to PutObject's If-None-Match: *
        assert c.get_object(Bucket="upload", Key="taken.bin")["Body"].read() == b"theirs"
        assert not [u for u in uploads_in_progress(c) if u[0] == "taken.bin"]
    out = sdrive(store, f"put taken.bin {2 * PART} n3 part={PART} overwrite")
    (_, res, _), = puts(out)
    assert res == "ok", out
    assert c.get_object(Bucket="upload", Key="taken.bin")["Body"].read() == data("n3", 2 * PART)


def test_rgw_abort_leaves_no_upload(rgw_up):
    """AbortMultipartUpload on RGW: no abort error, no object, no upload left in progress."""
    out = sdrive(rgw_up, f"put ab.bin {3 * PART} a1 part={PART} abort=2",
                 "wait-stat uploads_aborted 1", "stats")
    assert any(x.startswith("put aborted") for x in out), out
    assert stats_of(out)["abort_errors"] == 0
    c = rgw_up.client()
    assert "ab.bin" not in [o["Key"] for o in
                            c.list_objects_v2(Bucket="upload").get("Contents", [])]
    assert not [u for u in uploads_in_progress(c) if u[0] == "ab.bin"]


# ---------------------------------------------------------------------------------------------
# http: read-only


def test_http_is_read_only():
    out = drive("http://127.0.0.1:9/", "put a 10 x", "unlink a", "mkdir d", "rename a b")
    assert out[0] == "writable no"
    assert [parse(x)[1] for x in out[1:]] == ["err=-30"] * 4, out


# ---------------------------------------------------------------------------------------------
# file://


def tmp_names(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob(".tierfs-tmp-*"))


def test_file_upload_version_and_mode(tmp_path):
    """Parts written, fsync, rename: the bytes, mode 0644, no temporary file left, and the
    commit's version is the read path's ("dev-ino-size-mtime_ns")."""
    (tmp_path / "d").mkdir()
    size = 3 * MIB + 5
    out = drive(f"file://{tmp_path}", f"put d/o.bin {size} f1 part=1M",
                "stat d/o.bin", f"read d/o.bin {size} f1", "stats")
    (_, ok, kv), = puts(out)
    assert ok == "ok", out
    st = os.stat(tmp_path / "d" / "o.bin")
    want = f'"{st.st_dev:x}-{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"'
    assert kv["etag"] == want and f"stat ok size={size} etag={want}" in " ".join(out)
    assert (tmp_path / "d" / "o.bin").read_bytes() == data("f1", size)
    assert st.st_mode & 0o777 == 0o644 and "read match" in out
    assert tmp_names(tmp_path) == []
    assert stats_of(out)["parts"] == 4


def test_file_temporary_never_visible(tmp_path):
    """While an upload is open, its bytes sit in .tierfs-tmp-* beside the name: the name does
    not exist, and the read path neither lists nor stats the temporary file."""
    p = subprocess.Popen([driver_bin(), f"file://{tmp_path}", f"put o.bin {MIB} g1 pause"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=harness.clean_env())
    try:
        assert p.stdout.readline().startswith("writable yes")
        assert p.stdout.readline().strip() == "put paused"
        tmps = tmp_names(tmp_path)
        assert len(tmps) == 1 and not (tmp_path / "o.bin").exists()
        assert os.stat(tmp_path / tmps[0]).st_mode & 0o777 == 0o600
        seen = drive(f"file://{tmp_path}", "list", f"stat {tmps[0]}", f"read {tmps[0]} 1 x")
        assert seen[1] == "list" and seen[2].startswith("stat err=-2"), seen
        assert seen[3].startswith("read err=-2"), seen
        p.stdin.write("go\n")
        p.stdin.flush()
        assert p.stdout.readline().startswith("put ok")
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    assert tmp_names(tmp_path) == [] and (tmp_path / "o.bin").read_bytes() == data("g1", MIB)


def test_file_leftovers_removed_at_start(tmp_path):
    """A killed writer's temporary files go at the next start of a writing backend; not one a
    live writer holds (flock), not a directory or a symlink of that name, not another user's
    file, and nothing at all when the backend does not write."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    dead = [tmp_path / ".tierfs-tmp-dead1", tmp_path / "a" / "b" / ".tierfs-tmp-dead2"]
    for f in dead:
        f.write_bytes(b"partial")
    held = tmp_path / "a" / ".tierfs-tmp-held"
    held.write_bytes(b"alive")
    (tmp_path / ".tierfs-tmp-dir").mkdir()
    (tmp_path / ".tierfs-tmp-link").symlink_to(held)
    other = tmp_path / ".tierfs-tmp-other"
    other.write_bytes(b"not ours")
    os.chown(other, 65534, 65534)
    out = drive(f"file://{tmp_path}", "stats", opts=["--read-only"])
    assert stats_of(out)["tmp_removed"] == 0 and all(f.exists() for f in dead)
    with open(held, "rb") as h:
        fcntl.flock(h, fcntl.LOCK_EX)
        out = drive(f"file://{tmp_path}", "wait-stat tmp_removed 2", "mkdir z", "stats")
    assert stats_of(out)["tmp_removed"] == 2
    assert not any(f.exists() for f in dead)
    assert held.exists() and other.exists() and (tmp_path / ".tierfs-tmp-dir").is_dir()
    assert (tmp_path / ".tierfs-tmp-link").is_symlink()


def test_file_overwrite_refused(tmp_path):
    (tmp_path / "o.bin").write_bytes(b"old")
    out = drive(f"file://{tmp_path}", "put o.bin 10 v1", "put o.bin 10 v2 overwrite")
    r1, r2 = puts(out)
    assert r1[1].startswith("err=-17") and r2[1] == "ok", out
    assert (tmp_path / "o.bin").read_bytes() == data("v2", 10)
    assert tmp_names(tmp_path) == []


@pytest.mark.parametrize("walk", [False, True], ids=["openat2", "walk"])
def test_file_never_follows_a_symlink(tmp_path, walk):
    """A symlinked directory, in or out of the root, is not written through; a symlink at the
    name itself is replaced (with overwrite), its target untouched. Also on the path walk
    kernels without openat2 get (TIERFS_FILE_NO_OPENAT2=1)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "real").mkdir(parents=True)
    outside.mkdir()
    (root / "in").symlink_to(root / "real")
    (root / "out").symlink_to(outside)
    target = outside / "target"
    target.write_bytes(b"keep")
    (root / "name").symlink_to(target)
    out = drive(f"file://{root}", "put in/x 10 w1", "put out/x 10 w1", "put name 10 w2",
                "put name 10 w2 overwrite", "unlink out/target", "rename name out/moved",
                env={"TIERFS_FILE_NO_OPENAT2": "1"} if walk else None)
    r = puts(out)
    # the walk opens each component O_NOFOLLOW|O_DIRECTORY: a symlink there is ENOTDIR
    gone = "err=-20" if walk else "err=-2"
    assert [x[1].split()[0] for x in r] == [gone, gone, "err=-17", "ok"], out
    assert out[-2].startswith("unlink " + gone) and out[-1].startswith("rename " + gone), out
    assert os.listdir(outside) == ["target"] and target.read_bytes() == b"keep"
    assert os.listdir(root / "real") == []
    assert not (root / "name").is_symlink() and (root / "name").read_bytes() == data("w2", 10)


def test_file_metadata_calls(tmp_path):
    out = drive(f"file://{tmp_path}", "mkdir d", "mkdir d", "put d/a 5 m1", "put b 5 m2",
                "rename d/a b", "rename d/a b overwrite", "rename d/a c", "unlink b",
                "rmdir d", "rmdir nothere", "mkdir .tierfs-tmp-x")
    got = [parse(x)[:2] for x in out[1:] if not x.startswith("put ")]
    assert got == [("mkdir", "ok"), ("mkdir", "err=-17"), ("rename", "err=-17"),
                   ("rename", "ok"), ("rename", "err=-2"), ("unlink", "ok"),
                   ("rmdir", "ok"), ("rmdir", "err=-2"), ("mkdir", "err=-22")], out
    assert sorted(os.listdir(tmp_path)) == []


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tierfs-test", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_file_enospc(small_tmpfs):
    """A full filesystem: the part's done and the commit get ENOSPC, nothing under the name,
    the temporary file removed."""
    out = drive(f"file://{small_tmpfs}", "put big.bin 3M n1 part=1M", "put ok.bin 1K n2")
    r1, r2 = puts(out)
    assert r1[1].startswith("err=-28") and r2[1] == "ok", out
    assert os.listdir(small_tmpfs) == ["ok.bin"]


@pytest.mark.parametrize("what", ["upload-fsync", "upload-pwrite"])
def test_file_eio(tmp_path, what):
    """The disk fails (an LD_PRELOAD shim fails fsync or pwrite of the temporary file): EIO,
    nothing under the name, no temporary file left."""
    shim = Path(driver_bin()).parent / "eioshim.so"
    ctl = tmp_path / "ctl"
    ctl.write_text(what + "\n")
    root = tmp_path / "root"
    root.mkdir()
    out = drive(f"file://{root}", "put o.bin 1M e1", "stats",
                env={"LD_PRELOAD": str(shim), "TIERFS_EIO_CTL": str(ctl)})
    (_, res, _), = puts(out)
    assert res.startswith("err=-5"), out
    assert os.listdir(root) == []
    assert stats_of(out)["uploads_failed"] == 1
