/*
 * mac.c - the fleet's keyed MAC over shared-tier values (shared_key): GMAC under a key
 * derived for each value.
 *
 *   fleet key K (the file's bytes) ──HMAC-SHA256──► kdf: a keyed context, never updated
 *
 *   per value:  K_v = HMAC-SHA256(K, LABEL || salt)           salt: 16 random bytes, in the
 *               tag = GMAC-AES-256(K_v, IV 0^96)(header || data)    value's header
 *
 * Why not HMAC-SHA256 over the value: it is the obvious MAC, but it runs at the speed of
 * SHA-256, and a shared hit checks every byte of a block on the I/O thread, which also parses
 * every value; GMAC runs at the speed of carry-less multiplication, several times faster on a
 * CPU with both in hardware (the figures are in docs/performance.md).
 *
 * Why GMAC is a MAC here: GMAC (GCM with all of the message as associated data) is a secure
 * MAC as long as one key and IV never authenticate two different messages. Its weakness is
 * exactly that: two messages under one (key, IV) reveal the hash key H, and then anyone can
 * forge any message under that pair. Under one fleet key with random 96-bit IVs, the IVs of
 * 2^48 values collide with probability about one half (and a cloned VM repeats a generator's
 * output). So no value shares a key with another: K_v is HMAC-SHA256 of a fresh 128-bit salt
 * under the fleet's key (HMAC is a PRF; the label keeps this use apart from any other), so
 * every value has a key of its own, and two values share one only if their salts collide
 * (probability q^2 / 2^129 for q values: 2^-49 after a trillion). The IV can then be fixed.
 * A forger who copies a real value's salt and changes its bytes must still hit the tag of a
 * GMAC key it has seen one message of: a polynomial of degree (length / 16) in H, so a chance
 * of about (length / 16 + 2) / 2^128 per try, 2^-110 for a 4 MiB value. A forger who picks a
 * salt of its own gets a key it knows nothing about. The salt is covered by the tag too.
 *
 * Cost per value beyond the GMAC itself: one HMAC over 40 bytes and an AES key schedule,
 * microseconds, against a block's hundreds (4 MiB) or tens (64 KiB) of microseconds of GMAC.
 *
 * What stays in memory: K itself only inside OpenSSL's HMAC context (kdf), which cleanses it
 * when freed; each K_v on our stack, zeroed after use. The caller zeroes the file's bytes.
 *
 * Locking: none. The templates (kdf, gmac) are set up by bk_mac_new and only read afterwards:
 * every call duplicates what it needs, so any thread may call at any time.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "mac.h"

#define LABEL  "tierfs fleet value key v1" /* what K_v is for; the NUL is part of it */
#define KV_LEN 32u                         /* AES-256 */

struct bk_mac {
	EVP_MAC *hmac_alg, *gmac_alg;
	EVP_MAC_CTX *kdf;  /* HMAC-SHA256 keyed with the fleet's key; read-only */
	EVP_MAC_CTX *gmac; /* GMAC with its cipher (AES-256-GCM) set, no key; read-only */
};

static const unsigned char zero_iv[12];

static int templates(struct bk_mac *m, const void *key, size_t len)
{
	OSSL_PARAM hp[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
		OSSL_PARAM_construct_end(),
	};
	OSSL_PARAM gp[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, (char *)"AES-256-GCM", 0),
		OSSL_PARAM_construct_end(),
	};

	m->hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
	m->gmac_alg = EVP_MAC_fetch(NULL, "GMAC", NULL);
	if (!m->hmac_alg || !m->gmac_alg)
		return -ENOTSUP;
	m->kdf = EVP_MAC_CTX_new(m->hmac_alg);
	m->gmac = EVP_MAC_CTX_new(m->gmac_alg);
	if (!m->kdf || !m->gmac)
		return -ENOMEM;
	if (!EVP_MAC_init(m->kdf, key, len, hp) || !EVP_MAC_CTX_set_params(m->gmac, gp))
		return -ENOTSUP;
	return 0;
}

int bk_mac_new(const void *key, size_t len, struct bk_mac **ret)
{
	struct bk_mac *m;
	int r;

	if (len < BK_MAC_KEY_MIN || len > BK_MAC_KEY_MAX)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	r = templates(m, key, len);
	if (r < 0) {
		bk_mac_free(m);
		return r;
	}
	*ret = m;
	return 0;
}

void bk_mac_free(struct bk_mac *m)
{
	if (!m)
		return;
	EVP_MAC_CTX_free(m->kdf);
	EVP_MAC_CTX_free(m->gmac);
	EVP_MAC_free(m->hmac_alg);
	EVP_MAC_free(m->gmac_alg);
	free(m);
}

int bk_mac_salt(struct bk_mac *m, unsigned char *ret_salt)
{
	(void)m;
	return RAND_bytes(ret_salt, BK_MAC_SALT_LEN) == 1 ? 0 : -EIO;
}

/* K_v: the key of the value whose salt is @salt. @return 0 or -errno. */
static int value_key(struct bk_mac *m, const unsigned char *salt, unsigned char *ret_kv)
{
	EVP_MAC_CTX *c = EVP_MAC_CTX_dup(m->kdf);
	size_t n = 0;
	int r = -EIO;

	if (!c)
		return -ENOMEM;
	if (EVP_MAC_update(c, (const unsigned char *)LABEL, sizeof(LABEL)) &&
	    EVP_MAC_update(c, salt, BK_MAC_SALT_LEN) && EVP_MAC_final(c, ret_kv, &n, KV_LEN) &&
	    n == KV_LEN)
		r = 0;
	EVP_MAC_CTX_free(c);
	return r;
}

int bk_mac_tag(struct bk_mac *m, const unsigned char *salt, const void *a, size_t alen,
	       const void *b, size_t blen, unsigned char *ret_tag)
{
	OSSL_PARAM p[] = {
		OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, (void *)zero_iv,
						  sizeof(zero_iv)),
		OSSL_PARAM_construct_end(),
	};
	unsigned char kv[KV_LEN], tag[BK_MAC_TAG_LEN];
	EVP_MAC_CTX *c = NULL;
	size_t n = 0;
	int r;

	r = value_key(m, salt, kv);
	if (r < 0)
		goto out;
	r = -ENOMEM;
	c = EVP_MAC_CTX_dup(m->gmac);
	if (!c)
		goto out;
	r = -EIO;
	if (EVP_MAC_init(c, kv, KV_LEN, p) && EVP_MAC_update(c, a, alen) &&
	    EVP_MAC_update(c, b, blen) && EVP_MAC_final(c, tag, &n, sizeof(tag)) &&
	    n == BK_MAC_TAG_LEN) {
		memcpy(ret_tag, tag, BK_MAC_TAG_LEN);
		r = 0;
	}
out:
	EVP_MAC_CTX_free(c);
	OPENSSL_cleanse(kv, sizeof(kv));
	return r;
}
