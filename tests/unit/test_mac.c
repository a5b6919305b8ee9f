/*
 * test_mac.c - backend/mac.c: the fleet's MAC is the construction its essay describes (checked
 * against OpenSSL's HMAC and AES-256-GCM called directly), depends on every byte of key, salt
 * and message and on nothing else (not on where the message is cut in two), refuses keys of
 * the wrong length, and gives the same tags from several threads at once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "mac.h"

#define LABEL "tierfs fleet value key v1" /* mac.c's, NUL included: pinned here */

static unsigned char key[32], salt[BK_MAC_SALT_LEN], msg[5000];

static int setup(void **state)
{
	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (unsigned char)(i * 7 + 1);
	for (size_t i = 0; i < sizeof(salt); i++)
		salt[i] = (unsigned char)(0xa0 + i);
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (unsigned char)(i * 131 + 17);
	return 0;
}

/* The tag as the essay says, from OpenSSL's one-shot HMAC and its AES-256-GCM with the
 * message as associated data and nothing to encrypt. */
static void reference(const unsigned char *k, size_t klen, const unsigned char *s,
		      const unsigned char *m, size_t mlen, unsigned char *tag)
{
	unsigned char in[sizeof(LABEL) + BK_MAC_SALT_LEN], kv[32], iv[12] = {0};
	unsigned int kvlen = 0;
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int n;

	memcpy(in, LABEL, sizeof(LABEL));
	memcpy(in + sizeof(LABEL), s, BK_MAC_SALT_LEN);
	assert_non_null(HMAC(EVP_sha256(), k, (int)klen, in, sizeof(in), kv, &kvlen));
	assert_int_equal(kvlen, 32);
	assert_non_null(c);
	assert_int_equal(EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, kv, iv), 1);
	assert_int_equal(EVP_EncryptUpdate(c, NULL, &n, m, (int)mlen), 1);
	assert_int_equal(EVP_EncryptFinal_ex(c, tag, &n), 1);
	assert_int_equal(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, tag), 1);
	EVP_CIPHER_CTX_free(c);
}

static void the_construction(void **state)
{
	unsigned char want[16], got[16];
	struct bk_mac *m;

	assert_int_equal(bk_mac_new(key, sizeof(key), &m), 0);
	reference(key, sizeof(key), salt, msg, sizeof(msg), want);
	assert_int_equal(bk_mac_tag(m, salt, msg, 80, msg + 80, sizeof(msg) - 80, got), 0);
	assert_memory_equal(got, want, 16);
	/* the message is a followed by b, wherever it is cut */
	assert_int_equal(bk_mac_tag(m, salt, msg, 0, msg, sizeof(msg), got), 0);
	assert_memory_equal(got, want, 16);
	assert_int_equal(bk_mac_tag(m, salt, msg, sizeof(msg), msg, 0, got), 0);
	assert_memory_equal(got, want, 16);
	/* an empty message too */
	reference(key, sizeof(key), salt, msg, 0, want);
	assert_int_equal(bk_mac_tag(m, salt, msg, 0, msg, 0, got), 0);
	assert_memory_equal(got, want, 16);
	bk_mac_free(m);
}

/* Every bit of the key, the salt and the message changes the tag. */
static void every_bit_counts(void **state)
{
	unsigned char base[16], t[16];
	struct bk_mac *m, *m2;

	assert_int_equal(bk_mac_new(key, sizeof(key), &m), 0);
	assert_int_equal(bk_mac_tag(m, salt, msg, 80, msg + 80, 300, base), 0);
	for (size_t i = 0; i < 380 * 8; i++) {
		msg[i / 8] ^= (unsigned char)(1u << (i % 8));
		assert_int_equal(bk_mac_tag(m, salt, msg, 80, msg + 80, 300, t), 0);
		assert_memory_not_equal(t, base, 16);
		msg[i / 8] ^= (unsigned char)(1u << (i % 8));
	}
	for (size_t i = 0; i < sizeof(salt) * 8; i++) {
		salt[i / 8] ^= (unsigned char)(1u << (i % 8));
		assert_int_equal(bk_mac_tag(m, salt, msg, 80, msg + 80, 300, t), 0);
		assert_memory_not_equal(t, base, 16);
		salt[i / 8] ^= (unsigned char)(1u << (i % 8));
	}
	for (size_t i = 0; i < sizeof(key) * 8; i++) {
		key[i / 8] ^= (unsigned char)(1u << (i % 8));
		assert_int_equal(bk_mac_new(key, sizeof(key), &m2), 0);
		assert_int_equal(bk_mac_tag(m2, salt, msg, 80, msg + 80, 300, t), 0);
		assert_memory_not_equal(t, base, 16);
		bk_mac_free(m2);
		key[i / 8] ^= (unsigned char)(1u << (i % 8));
	}
	/* a message one byte shorter or longer */
	assert_int_equal(bk_mac_tag(m, salt, msg, 80, msg + 80, 299, t), 0);
	assert_memory_not_equal(t, base, 16);
	assert_int_equal(bk_mac_tag(m, salt, msg, 80, msg + 80, 301, t), 0);
	assert_memory_not_equal(t, base, 16);
	bk_mac_free(m);
}

static void key_lengths(void **state)
{
	unsigned char big[BK_MAC_KEY_MAX + 1] = {1};
	struct bk_mac *m = NULL;

	assert_int_equal(bk_mac_new(big, BK_MAC_KEY_MIN - 1, &m), -EINVAL);
	assert_int_equal(bk_mac_new(big, BK_MAC_KEY_MAX + 1, &m), -EINVAL);
	assert_null(m);
	assert_int_equal(bk_mac_new(big, BK_MAC_KEY_MAX, &m), 0);
	bk_mac_free(m);
	assert_int_equal(bk_mac_new(big, BK_MAC_KEY_MIN, &m), 0);
	bk_mac_free(m);
	bk_mac_free(NULL);
}

static void salts_are_fresh(void **state)
{
	unsigned char a[BK_MAC_SALT_LEN], b[BK_MAC_SALT_LEN];
	struct bk_mac *m;

	assert_int_equal(bk_mac_new(key, sizeof(key), &m), 0);
	assert_int_equal(bk_mac_salt(m, a), 0);
	assert_int_equal(bk_mac_salt(m, b), 0);
	assert_memory_not_equal(a, b, sizeof(a));
	bk_mac_free(m);
}

struct job {
	struct bk_mac *m;
	unsigned char want[16];
	int bad;
};

static void *worker(void *arg)
{
	struct job *j = arg;
	unsigned char t[16];

	for (int i = 0; i < 2000; i++)
		if (bk_mac_tag(j->m, salt, msg, 80, msg + 80, 1000, t) != 0 ||
		    memcmp(t, j->want, 16) != 0)
			j->bad++;
	return NULL;
}

/* One bk_mac, four threads at once (put and check run on any thread): the same tags. */
static void threads(void **state)
{
	struct job j[4];
	pthread_t t[4];
	struct bk_mac *m;
	unsigned char want[16];

	assert_int_equal(bk_mac_new(key, sizeof(key), &m), 0);
	reference(key, sizeof(key), salt, msg, 1080, want);
	for (int i = 0; i < 4; i++) {
		j[i] = (struct job){.m = m};
		memcpy(j[i].want, want, 16);
		assert_int_equal(pthread_create(&t[i], NULL, worker, &j[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(j[i].bad, 0);
	}
	bk_mac_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_construction),
		cmocka_unit_test(every_bit_counts),
		cmocka_unit_test(key_lengths),
		cmocka_unit_test(salts_are_fresh),
		cmocka_unit_test(threads),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
