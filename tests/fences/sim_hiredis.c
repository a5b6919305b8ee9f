/* sim/ must not include hiredis (it simulates Redis): the build refuses this file */
#include <hiredis/hiredis.h>

int fence_sim_hiredis(void);
int fence_sim_hiredis(void) { return 0; }
