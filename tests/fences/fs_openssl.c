/* fs/ must not include OpenSSL: the build refuses this file */
#include <openssl/evp.h>

int fence_fs_openssl(void);
int fence_fs_openssl(void) { return 0; }
