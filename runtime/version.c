/* SPDX-License-Identifier: MIT */
/* pvrt_version(): the library's version, for programs to compare with the headers'. */
#include <pvrt/version.h>

unsigned pvrt_version(void)
{
	return PVRT_VERSION;
}
