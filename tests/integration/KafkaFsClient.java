/*
 * A client shaped like Kafka tiered storage's filesystem backend (Aiven's, which Strimzi's guide
 * points at a shared path with storage.root), using the same plain JDK calls:
 *
 *   start:  the root must be a writable directory (Files.isDirectory, Files.isWritable)
 *   upload: Files.createDirectories(parent), Files.copy(stream, path, REPLACE_EXISTING), then
 *           Files.size(path)
 *   fetch:  Files.newInputStream(path), skip(from), a bounded read
 *   delete: Files.deleteIfExists(path), then every parent left empty, up to the root
 *
 * java KafkaFsClient ROOT SEED: uploads a log segment (10 MiB + 7) and its index (64 KiB + 3)
 * of topic "orders-0", reads them back whole and by ranges, uploads the segment again over
 * itself (REPLACE_EXISTING), then deletes both and the emptied directories. Prints one line
 * per step; exits non-zero at the first thing that is not as it should be.
 */
import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.util.Arrays;

public class KafkaFsClient {
	static byte[] data(String seed, int size) throws Exception {
		byte[] out = new byte[size];
		MessageDigest md = MessageDigest.getInstance("SHA-256");
		byte[] block = md.digest(seed.getBytes("UTF-8"));
		for (int i = 0; i < size; i += 32) {
			block = md.digest(block);
			System.arraycopy(block, 0, out, i, Math.min(32, size - i));
		}
		return out;
	}

	static void check(boolean ok, String what) {
		if (!ok) {
			System.out.println("FAIL " + what);
			System.exit(1);
		}
		System.out.println("ok " + what);
	}

	static void upload(Path path, byte[] bytes) throws Exception {
		Files.createDirectories(path.getParent());
		Files.copy(new ByteArrayInputStream(bytes), path, StandardCopyOption.REPLACE_EXISTING);
		check(Files.size(path) == bytes.length, "upload " + path.getFileName() + " size");
	}

	static byte[] fetch(Path path, long from, int len) throws Exception {
		try (InputStream in = Files.newInputStream(path)) {
			long skipped = 0;
			while (skipped < from) {
				long n = in.skip(from - skipped);
				if (n <= 0)
					break;
				skipped += n;
			}
			return in.readNBytes(len);
		}
	}

	static void delete(Path root, Path path) throws Exception {
		Files.deleteIfExists(path);
		for (Path p = path.getParent(); p != null && !p.equals(root); p = p.getParent()) {
			try (DirectoryStream<Path> ds = Files.newDirectoryStream(p)) {
				if (ds.iterator().hasNext())
					return;
			}
			Files.delete(p);
		}
	}

	public static void main(String[] args) throws Exception {
		Path root = Paths.get(args[0]);
		String seed = args[1];
		check(Files.isDirectory(root) && Files.isWritable(root), "root is a writable directory");
		Path dir = root.resolve("orders-0");
		Path seg = dir.resolve("00000000000000000000-" + seed + ".log");
		Path idx = dir.resolve("00000000000000000000-" + seed + ".index");
		byte[] s = data(seed + "-log", 10 * 1024 * 1024 + 7), x = data(seed + "-idx", 65536 + 3);
		upload(seg, s);
		upload(idx, x);
		check(Arrays.equals(fetch(seg, 0, s.length), s), "segment read whole");
		long[][] ranges = {{0, 100}, {4194300, 8}, {5 * 1024 * 1024 + 1, 700000}, {s.length - 5, 5}};
		for (long[] r : ranges)
			check(Arrays.equals(fetch(seg, r[0], (int)r[1]), Arrays.copyOfRange(s, (int)r[0],
				(int)(r[0] + r[1]))), "segment range " + r[0] + "+" + r[1]);
		check(Arrays.equals(fetch(idx, 1000, 4096), Arrays.copyOfRange(x, 1000, 5096)), "index range");
		byte[] s2 = data(seed + "-log2", 3 * 1024 * 1024);
		upload(seg, s2);
		check(Arrays.equals(fetch(seg, 0, s2.length + 10), s2), "segment replaced");
		delete(root, seg);
		delete(root, idx);
		check(!Files.exists(seg) && !Files.exists(idx) && !Files.exists(dir), "deleted, parents too");
		System.out.println("done");
	}
}
