"""A fake Redis on 127.0.0.1 for the shared tier's trust tests (test_shared_trust.py): it speaks
enough RESP for what tierfs sends (AUTH, GET, SET with and without NX PX, EVAL, DEL, PING) and
answers GETs as a hostile server would, one way per test:

  "nil"      no value (a plain, honest miss)
  "forge"    a well-framed value of the block asked for, its data replaced and its CRC-32C
             recomputed, as anyone who can write to Redis can make it (no MAC, or a MAC made up)
  "bigbulk"  "$4000000000", then bytes as fast as the socket takes them
  "bigarray" "*50000000", then ":1" elements as fast as the socket takes them
  "dribble"  the length of a whole value, then one byte every `dribble_s`, for ever

Streams stop when the client closes the connection, when stop() is called, or after
`stream_cap` bytes on one connection (a bound for the tests run against code that does not
close). Every connection's fate is recorded: `closed_by_client` counts the connections whose
peer closed (a read of 0 or a reset) while the server still had something to say.

Value framing (tiers/fleet_value.h, format 2): an 80-byte header then the data.
"""

import socket
import struct
import threading
import time

HDR = 80
FORMAT = 2


def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _crc32c_table()


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli), as cache/crc32c.c computes it (ISA-L's crc32_iscsi with seed 0,
    no final inversion beyond the usual)."""
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = _T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def parse_key(key):
    """(oid_hi, oid_lo, blk, bs) of a block key "<prefix>tfs1:<oid 32 hex>:<blk hex>:<bs>"."""
    oid, blk, bs = key.rsplit(b":", 3)[1:]
    return int(oid[:16], 16), int(oid[16:], 16), int(blk, 16), int(bs)


def frame(hi, lo, blk, bs, data, mac=0, salt=b"\0" * 16, tag=b"\0" * 16):
    """A format-2 value of block (hi, lo, blk) of block size @bs holding @data, its CRC right:
    what a forger writes (with @mac 1 and a made-up @salt and @tag, it claims a MAC)."""
    head = b"TFSB" + struct.pack("<IQQQII", FORMAT, hi, lo, blk, bs, len(data))
    crc = crc32c(data, crc32c(head))
    return head + struct.pack("<II", crc, mac) + salt + tag + data


def forged(key, size):
    """A forged value for block @key of an object of @size bytes: POISONED!! over its data."""
    hi, lo, blk, bs = parse_key(key)
    n = min(bs, size - blk * bs)
    data = (b"POISONED!!" * (n // 10 + 1))[:n]
    return frame(hi, lo, blk, bs, data)


class FakeRedis:
    def __init__(self, mode, size=None, dribble_s=0.02, stream_cap=1 << 30):
        self.mode = mode
        self.size = size  # the object's size, for "forge" (its last block may be short)
        self.forge = forged  # (key, size) -> value; a test may swap it
        self.dribble_s = dribble_s
        self.stream_cap = stream_cap
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.connections = 0
        self.closed_by_client = 0
        self.gets = 0
        self.sent = 0  # bytes of streams sent, all connections
        self.nodes = None  # bytes: CLUSTER NODES is answered with them (None: unknown command)
        self.moved = None  # bytes: every GET is answered "-" + them (a MOVED or ASK)
        self.ls = socket.create_server(("127.0.0.1", 0))
        self.port = self.ls.getsockname()[1]
        self.socks = [self.ls]
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def stop(self):
        self.stopped.set()
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self):
        while not self.stopped.is_set():
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                self.socks.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _closed(self):
        with self.lock:
            self.closed_by_client += 1

    # -- RESP in ------------------------------------------------------------------------------

    @staticmethod
    def _read_command(f):
        line = f.readline()
        if not line:
            return None
        if not line.startswith(b"*"):
            raise ValueError(f"not a command: {line!r}")
        args = []
        for _ in range(int(line[1:-2])):
            n = int(f.readline()[1:-2])
            args.append(f.read(n + 2)[:-2])
        return args

    # -- answers ------------------------------------------------------------------------------

    def _serve(self, c):
        f = c.makefile("rb")
        try:
            while not self.stopped.is_set():
                cmd = self._read_command(f)
                if cmd is None:
                    self._closed()
                    return
                if not self._answer(c, [cmd[0].upper()] + cmd[1:]):
                    return
        except (OSError, ValueError):
            self._closed()
        finally:
            try:
                c.close()
            except OSError:
                pass

    def _answer(self, c, cmd):
        """Answer one command. @return False once the connection is done with."""
        name = cmd[0]
        if name in (b"AUTH", b"PING"):
            c.sendall(b"+OK\r\n" if name == b"AUTH" else b"+PONG\r\n")
        elif name == b"SET":
            c.sendall(b"+OK\r\n")  # a lock SET NX: won; a value: stored (and dropped)
        elif name in (b"EVAL", b"EVALSHA", b"DEL"):
            c.sendall(b":1\r\n")
        elif name == b"CLUSTER" and self.nodes is not None:
            c.sendall(b"$%d\r\n%s\r\n" % (len(self.nodes), self.nodes))
        elif name == b"GET" and self.moved is not None:
            with self.lock:
                self.gets += 1
            c.sendall(b"-" + self.moved + b"\r\n")
        elif name == b"GET":
            with self.lock:
                self.gets += 1
            return self._get(c, cmd[1])
        else:
            c.sendall(b"-ERR unknown command\r\n")
        return True

    def _get(self, c, key):
        if self.mode == "nil":
            c.sendall(b"$-1\r\n")
        elif self.mode == "forge":
            v = self.forge(key, self.size)
            c.sendall(b"$%d\r\n%s\r\n" % (len(v), v))
        elif self.mode == "bigbulk":
            return self._stream(c, b"$4000000000\r\n", b"\xa5" * (1 << 20))
        elif self.mode == "bigarray":
            return self._stream(c, b"*50000000\r\n", b":1\r\n" * (1 << 18))
        elif self.mode == "dribble":
            _, _, _, bs = parse_key(key)
            return self._dribble(c, b"$%d\r\n" % (HDR + bs))
        return True

    def _stream(self, c, head, chunk):
        n = 0
        try:
            c.sendall(head)
            while not self.stopped.is_set() and n < self.stream_cap:
                c.sendall(chunk)
                n += len(chunk)
                with self.lock:
                    self.sent += len(chunk)
        except OSError:
            self._closed()  # the client closed it: what the bound does
        return False

    def _dribble(self, c, head):
        try:
            c.sendall(head)
            while not self.stopped.is_set():
                time.sleep(self.dribble_s)
                c.sendall(b"\xa5")
                with self.lock:
                    self.sent += 1
        except OSError:
            self._closed()
        return False
