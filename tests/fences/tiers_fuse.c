/* tiers/ must not include FUSE: the build refuses this file */
#include <fuse3/fuse_lowlevel.h>

int fence_tiers_fuse(void);
int fence_tiers_fuse(void) { return 0; }
