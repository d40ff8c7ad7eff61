/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * A non-fatal assertion for the unit tests: prints "ok: ..." or
 * "FAIL: ...", counts failures; main returns check_failures ? 1 : 0.
 */
#ifndef MRL_TEST_CHECK_H
#define MRL_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int check_failures;

static void check(int ok, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void check(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s: ", ok ? "ok" : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	check_failures += !ok;
}

#endif /* MRL_TEST_CHECK_H */
