/* sim/ must not reach into fs/ by a relative path: scripts/check-includes refuses this file */
#include "../../fs/fs_i.h"

int fence_sim_relative(void);
int fence_sim_relative(void) { return 0; }
