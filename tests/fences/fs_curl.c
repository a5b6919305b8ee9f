/* fs/ must not include curl: the build refuses this file */
#include <curl/curl.h>

int fence_fs_curl(void);
int fence_fs_curl(void) { return 0; }
