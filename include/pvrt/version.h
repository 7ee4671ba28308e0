/* SPDX-License-Identifier: MIT */
/*
 * The version of the pvrt headers, and pvrt_version() for the version of the library in use.
 *
 * Compatibility rule while the major version is 0: a minor release may change the ABI; the
 * libraries' sonames (libpvrt.so.0, libpvhint.so.0) and symbol versions (PVRT_0, PVHINT_0)
 * change with the first frozen ABI. Structs passed in and out carry a size field, so that
 * fields can be appended without breaking programs built against older headers.
 */
#ifndef PVRT_VERSION_H
#define PVRT_VERSION_H

#include <pvrt/export.h>

PVRT_BEGIN_DECLS

/* Kept equal to project(VERSION) of CMakeLists.txt (checked at configure time). */
#define PVRT_VERSION_MAJOR  0
#define PVRT_VERSION_MINOR  1
#define PVRT_VERSION_PATCH  0
#define PVRT_VERSION_STRING "0.1.0"

/* One number, comparable: (major << 16) | (minor << 8) | patch. */
#define PVRT_VERSION_ENCODE(maj, min, patch) (((maj) << 16) | ((min) << 8) | (patch))

#define PVRT_VERSION PVRT_VERSION_ENCODE(PVRT_VERSION_MAJOR, PVRT_VERSION_MINOR, PVRT_VERSION_PATCH)

/* The version of the libpvrt in use, as PVRT_VERSION: compare it with the headers' to detect a
 * program running against another library than it was built with.
 * Context: any; the runtime need not run. */
PVRT_API unsigned pvrt_version(void);

PVRT_END_DECLS

#endif /* PVRT_VERSION_H */
