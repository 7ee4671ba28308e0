/* SPDX-License-Identifier: MIT */
/* The library in use says the version of the headers it was built with. */
#include "check.h"

#include <pvrt/version.h>

#include <stdio.h>
#include <string.h>

int main(void)
{
	CHECK_EQ(pvrt_version(), PVRT_VERSION);
	CHECK_EQ(PVRT_VERSION, (PVRT_VERSION_MAJOR << 16) | (PVRT_VERSION_MINOR << 8) |
				   PVRT_VERSION_PATCH);
	char s[32];
	snprintf(s, sizeof s, "%d.%d.%d", PVRT_VERSION_MAJOR, PVRT_VERSION_MINOR,
		 PVRT_VERSION_PATCH);
	CHECK(!strcmp(s, PVRT_VERSION_STRING));
	return 0;
}
