/* sim/ sees fs/include/ (fs.h), not fs/'s private headers: the compiler finds no fs_i.h */
#include "fs_i.h"

int fence_sim_fs_private(void);
int fence_sim_fs_private(void) { return 0; }
