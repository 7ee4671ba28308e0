/* SPDX-License-Identifier: MIT */
/* The policies by name (PVRT_SCHED, struct pvrt_config.sched); the first is the default. */
#include "pvrt_sched.h"

#include <string.h>

static const struct pvrt_sched_policy *const policies[] = {&pvrt_sched_hints, &pvrt_sched_random};

const struct pvrt_sched_policy *pvrt_sched_find(const char *name)
{
	if (!name)
		return policies[0];
	for (unsigned i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
		if (!strcmp(policies[i]->name, name))
			return policies[i];
	return NULL;
}

const char *pvrt_sched_names(void)
{
	return "hints (default), random";
}
