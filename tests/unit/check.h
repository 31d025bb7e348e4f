/* check.h - a tiny assertion harness for unit tests (chibicc style: each
 * failing CHECK prints the expression, file and line; main returns the
 * failure count so ctest sees it). */
#ifndef DTM_CHECK_H
#define DTM_CHECK_H
#include <stdio.h>
#include <string.h>
#include <math.h>

static int check_failures, check_count;

#define CHECK(c)                                                                 \
	do {                                                                     \
		check_count++;                                                   \
		if (!(c)) {                                                      \
			check_failures++;                                        \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__,   \
			        __LINE__, #c);                                   \
		}                                                                \
	} while (0)
#define CHECK_EQ_INT(a, b)                                                       \
	do {                                                                     \
		long long va_ = (long long)(a), vb_ = (long long)(b);            \
		check_count++;                                                   \
		if (va_ != vb_) {                                                \
			check_failures++;                                        \
			fprintf(stderr, "%s:%d: CHECK_EQ_INT failed: %s == %s (%lld vs %lld)\n", \
			        __FILE__, __LINE__, #a, #b, va_, vb_);           \
		}                                                                \
	} while (0)
#define CHECK_EQ_STR(a, b)                                                       \
	do {                                                                     \
		const char *sa_ = (a), *sb_ = (b);                               \
		check_count++;                                                   \
		if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0) {                     \
			check_failures++;                                        \
			fprintf(stderr, "%s:%d: CHECK_EQ_STR failed: %s == %s (\"%s\" vs \"%s\")\n", \
			        __FILE__, __LINE__, #a, #b, sa_ ? sa_ : "(null)", \
			        sb_ ? sb_ : "(null)");                           \
		}                                                                \
	} while (0)
#define CHECK_NEAR(a, b, tol)                                                    \
	do {                                                                     \
		double va_ = (a), vb_ = (b);                                     \
		check_count++;                                                   \
		if (!(fabs(va_ - vb_) <= (tol))) {                               \
			check_failures++;                                        \
			fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s ~ %s (%.9g vs %.9g)\n", \
			        __FILE__, __LINE__, #a, #b, va_, vb_);           \
		}                                                                \
	} while (0)

static int check_report(void)
{
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}
#endif
