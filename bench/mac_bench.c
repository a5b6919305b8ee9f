/*
 * mac_bench.c - the keyed MACs OpenSSL offers (EVP_MAC), and CRC-32C, over one buffer of a
 * block's size in cache, against backend/mac.c's (GMAC under a per-value key, what a shared
 * hit checks with shared_key). Prints MB/s of each, and the per-value cost of bk_mac_tag on an
 * empty message (the key derivation and set-up). How the shared tier's MAC was chosen: see
 * backend/mac.c; the figures are in docs/performance.md.
 *
 *     build/bench/mac-bench [KiB]     (default 4096: a 4 MiB block; each for about a second)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "mac.h"

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One EVP_MAC @name (with @param = @value when set), keyed afresh for every message, as a
 * value's MAC would be. */
static void evp(const char *name, const char *param, const char *value, const unsigned char *buf,
		size_t n)
{
	static const unsigned char key[32] = {1}, iv[12] = {2};
	unsigned char out[64];
	OSSL_PARAM p[3], *q = p;
	EVP_MAC *m = EVP_MAC_fetch(NULL, name, NULL);
	EVP_MAC_CTX *c = m ? EVP_MAC_CTX_new(m) : NULL;
	double t0 = now(), t = 0;
	long rounds = 0;
	size_t ol;

	if (!c) {
		printf("%-12s not in this OpenSSL\n", name);
		EVP_MAC_free(m);
		return;
	}
	if (param)
		*q++ = OSSL_PARAM_construct_utf8_string(param, (char *)value, 0);
	if (!strcmp(name, "GMAC"))
		*q++ = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, (void *)iv, sizeof(iv));
	*q = OSSL_PARAM_construct_end();
	do {
		if (!EVP_MAC_init(c, key, strcmp(name, "SIPHASH") ? 32 : 16, p) ||
		    !EVP_MAC_update(c, buf, n) || !EVP_MAC_final(c, out, &ol, sizeof(out)))
			break;
		rounds++;
	} while ((t = now() - t0) < 1.0);
	if (rounds)
		printf("%-12s %8.0f MB/s\n", name, (double)rounds * (double)n / t / 1e6);
	else
		printf("%-12s failed\n", name);
	EVP_MAC_CTX_free(c);
	EVP_MAC_free(m);
}

static void ours(const unsigned char *buf, size_t n)
{
	static const unsigned char key[32] = {3}, salt[BK_MAC_SALT_LEN] = {4};
	unsigned char hdr[64] = {0}, tag[BK_MAC_TAG_LEN];
	struct bk_mac *m;
	double t0, t;
	long rounds = 0;

	if (bk_mac_new(key, sizeof(key), &m) < 0) {
		printf("bk_mac_new failed\n");
		return;
	}
	t0 = now();
	do {
		bk_mac_tag(m, salt, hdr, sizeof(hdr), buf, n, tag);
		rounds++;
	} while ((t = now() - t0) < 1.0);
	printf("%-12s %8.0f MB/s\n", "bk_mac_tag", (double)rounds * (double)n / t / 1e6);
	t0 = now();
	rounds = 0;
	do {
		bk_mac_tag(m, salt, hdr, 0, buf, 0, tag);
		rounds++;
	} while ((t = now() - t0) < 0.5);
	printf("%-12s %8.2f us a value\n", "  set-up", t / (double)rounds * 1e6);
	bk_mac_free(m);
}

int main(int argc, char **argv)
{
	size_t n = (argc > 1 ? strtoul(argv[1], NULL, 10) : 4096) << 10;
	unsigned char *buf = malloc(n ? n : 1);

	if (!buf || !n)
		return 2;
	memset(buf, 0x5a, n);
	printf("%zu KiB messages, OpenSSL %s\n", n >> 10, OpenSSL_version(OPENSSL_VERSION));
	evp("HMAC", OSSL_MAC_PARAM_DIGEST, "SHA256", buf, n);
	evp("GMAC", OSSL_MAC_PARAM_CIPHER, "AES-256-GCM", buf, n);
	evp("POLY1305", NULL, NULL, buf, n);
	evp("BLAKE2BMAC", NULL, NULL, buf, n);
	evp("KMAC128", NULL, NULL, buf, n);
	evp("SIPHASH", NULL, NULL, buf, n);
	ours(buf, n);
	free(buf);
	return 0;
}
