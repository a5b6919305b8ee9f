/* cache/ must not include curl: the build refuses this file */
#include <curl/curl.h>

int fence_cache_curl(void);
int fence_cache_curl(void) { return 0; }
