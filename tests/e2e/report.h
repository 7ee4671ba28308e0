/* SPDX-License-Identifier: MIT */
/* PASS/FAIL lines of the programs run in L2; run-e2e counts them and main() exits on 'failures'. */
#ifndef PVRT_E2E_REPORT_H
#define PVRT_E2E_REPORT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static int failures;
static const char *report_prefix = ""; /* tells the programs' check names apart */

static void report(bool ok, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void report(bool ok, const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("%s %s%s: ", ok ? "PASS" : "FAIL", report_prefix, name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout); /* the console interleaves several programs' output */
	if (!ok)
		failures++;
}

#endif /* PVRT_E2E_REPORT_H */
