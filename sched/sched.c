/* SPDX-License-Identifier: MIT */
/* The policies by name (PVRT_SCHED, struct pvrt_config.sched); the first is the default. */
#include "pvrt_sched.h"

#include <string.h>

static const struct rt_sched_policy *const policies[] = {&rt_sched_hints, &rt_sched_random};

const struct rt_sched_policy *rt_sched_find(const char *name)
{
	if (!name)
		return policies[0];
	for (unsigned i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
		if (!strcmp(policies[i]->name, name))
			return policies[i];
	return NULL;
}

const char *rt_sched_names(void)
{
	return "hints (default), random";
}
