/* SPDX-License-Identifier: MIT */
/*
 * glibc state that its start_thread sets up for every new thread, checked in ULTs (pvrt-run --mn):
 *   ctype     isalpha/toupper/tolower (__ctype_b, __ctype_toupper, __ctype_tolower: per-thread
 *             pointers that __ctype_init sets; zero in fresh TLS), also under uselocale
 *   affinity  sched_getaffinity(0) and pthread_getaffinity_np(self) report the CPUs the program
 *             was started on (those of its parent, which runs natively), not the one CPU the
 *             worker is pinned to: OpenBLAS and libgomp size their thread pools from it
 */
#include "mn_check.h"

#include <ctype.h>
#include <locale.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define NT 8

static void check_ctype(void)
{
	const char *s = "Hello, World 42!";
	char up[32], lo[32];
	int alpha = 0, digit = 0;
	for (size_t i = 0; s[i]; i++) {
		unsigned char c = (unsigned char)s[i];
		alpha += isalpha(c) != 0;
		digit += isdigit(c) != 0;
		up[i] = (char)toupper(c);
		lo[i] = (char)tolower(c);
		up[i + 1] = lo[i + 1] = 0;
	}
	CHECK_EQ(alpha, 10);
	CHECK_EQ(digit, 2);
	CHECK(!strcmp(up, "HELLO, WORLD 42!"));
	CHECK(!strcmp(lo, "hello, world 42!"));
	/* A per-thread locale: the ctype pointers follow uselocale. */
	locale_t l = newlocale(LC_CTYPE_MASK, "C", (locale_t)0);
	CHECK(l != (locale_t)0);
	locale_t old = uselocale(l);
	CHECK(isupper('Q') && !isupper('q') && toupper('q') == 'Q');
	uselocale(old);
	freelocale(l);
	CHECK(isspace(' ') && !isspace('x'));
}

static cpu_set_t parent_cpus;

static void check_affinity(void)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CHECK_EQ(sched_getaffinity(0, sizeof(s), &s), 0);
	if (!CPU_EQUAL(&s, &parent_cpus)) {
		fprintf(stderr, "sched_getaffinity: %d CPUs, the program was started on %d\n",
			CPU_COUNT(&s), CPU_COUNT(&parent_cpus));
		exit(1);
	}
	CPU_ZERO(&s);
	CHECK_EQ(pthread_getaffinity_np(pthread_self(), sizeof(s), &s), 0);
	CHECK(CPU_EQUAL(&s, &parent_cpus));
}

static void *thread(void *a)
{
	mn_tid_seen();
	check_ctype();
	check_affinity();
	sched_yield();
	mn_tid_seen();
	check_ctype();
	return a;
}

int main(void)
{
	CPU_ZERO(&parent_cpus);
	CHECK_EQ(sched_getaffinity(getppid(), sizeof(parent_cpus), &parent_cpus), 0);
	check_ctype();
	check_affinity();
	pthread_t t[NT];
	for (int i = 0; i < NT; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, thread, NULL), 0);
	for (int i = 0; i < NT; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	mn_check_ults(NT);
	printf("mn_libc: ok\n");
	return 0;
}
