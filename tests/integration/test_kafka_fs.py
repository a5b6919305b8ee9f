"""A client shaped like Kafka tiered storage's filesystem backend (KafkaFsClient.java, built here
with the JDK on the machine) uploads, verifies whole objects and ranges, overwrites, and deletes
with the removal of emptied parents, through a mount of a file:// store and of each S3 store
(s3rver and Ceph RGW); the store's contents are checked from outside the mount after each
phase."""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import harness

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    javac, java = shutil.which("javac"), shutil.which("java")
    if not javac or not java:
        pytest.fail("javac and java are needed (scripts/bootstrap installs a JDK)")
    out = tmp_path_factory.mktemp("java")
    subprocess.run([javac, "-d", str(out), str(HERE / "KafkaFsClient.java")], check=True,
                   timeout=120)
    return [java, "-cp", str(out), "KafkaFsClient"]


def java_data(seed, size):
    """The bytes KafkaFsClient.data makes: SHA-256 chained from the seed's."""
    out, block = bytearray(), hashlib.sha256(seed.encode()).digest()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


def run(client, root, seed):
    p = subprocess.run(client + [str(root), seed], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.rstrip().endswith("done"), p.stdout + p.stderr
    return p.stdout


def test_kafka_like_client_on_file_store(client, mount, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount("file://" + str(store), ["allow_write", "allow_overwrite", "allow_delete",
                                       "block_size=1M"])
    out = run(client, m.mnt, "f1")
    assert "ok segment replaced" in out
    assert os.listdir(store) == [], "the client's objects and directories were all removed"
    # an upload left in place is in the store whole, as the client wrote it
    (Path(m.mnt) / "keep").mkdir()
    subprocess.run(["dd", "if=/dev/zero", f"of={m.path('keep/z.bin')}", "bs=8k", "count=100"],
                   check=True, capture_output=True)
    assert (store / "keep/z.bin").read_bytes() == b"\0" * 819200


def test_kafka_like_client_on_s3(client, mount, s3store):
    """On each S3 store (s3rver, Ceph RGW): the client's run leaves the prefix empty, and a
    segment left in place is in the bucket whole, as the client wrote it."""
    m = mount(f"s3://{harness.BUCKET}/kafka", [f"endpoint={s3store.endpoint}", "path_style",
                                                "block_size=1M", "part_size=5M",
                                                "allow_write", "allow_overwrite",
                                                "allow_delete"], env=s3store.env)
    out = run(client, m.mnt, "s1")
    assert "ok segment replaced" in out
    cli = s3store.client()
    assert cli.list_objects_v2(Bucket=harness.BUCKET, Prefix="kafka/").get("KeyCount", 0) == 0
    # a segment of several parts left in place: the bucket holds exactly its bytes
    seg = java_data("keep", 11 * 1024 * 1024 + 3)
    os.makedirs(m.path("keep"))
    with open(m.path("keep/00000000000000000000.log"), "wb") as f:
        for i in range(0, len(seg), 1 << 20):
            f.write(seg[i:i + (1 << 20)])
    key = "kafka/keep/00000000000000000000.log"
    assert cli.get_object(Bucket=harness.BUCKET, Key=key)["Body"].read() == seg
    os.unlink(m.path("keep/00000000000000000000.log"))
    os.rmdir(m.path("keep"))
    assert cli.list_objects_v2(Bucket=harness.BUCKET, Prefix="kafka/").get("KeyCount", 0) == 0
