/* SPDX-License-Identifier: MIT */
/* A module loaded by dlopen in test_tls: its TLS is dynamic (general-dynamic model, allocated per
 * thread on first use through __tls_get_addr and the thread's DTV). */
static __thread long big[512] = {42};

__attribute__((visibility("default"))) long tls_mod_get(int i)
{
	return big[i];
}

__attribute__((visibility("default"))) void tls_mod_set(int i, long v)
{
	big[i] = v;
}

__attribute__((visibility("default"))) void *tls_mod_addr(void)
{
	return big;
}
