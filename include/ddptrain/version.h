/* Version and build information (what `ddptrain --version` and
 * `--build-info` print). */
#ifndef DDPTRAIN_VERSION_H
#define DDPTRAIN_VERSION_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "0.1.0" */
const char *ddp_version(void);

/* Backends compiled into this build, in registry order: "cuda, cpu". */
const char *ddp_build_backends(void);

/* Multi-line report: version, compiled backends, and every dependency with
 * whether it was found and its version. Safe to call before MPI starts. */
void ddp_build_info_print(FILE *out);

#ifdef __cplusplus
}
#endif
#endif
