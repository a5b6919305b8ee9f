/* sim/ must not include curl: the build refuses this file */
#include <curl/curl.h>

int fence_sim_curl(void);
int fence_sim_curl(void) { return 0; }
