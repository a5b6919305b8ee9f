/* cache/ must not include OpenSSL: the build refuses this file */
#include <openssl/evp.h>

int fence_cache_openssl(void);
int fence_cache_openssl(void) { return 0; }
