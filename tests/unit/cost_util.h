/* cost_util.h - helpers of the cost model's tests (test_cost.c,
 * test_cost_cal.c): captured output, a one-GEMM plan, a profile printed
 * and read back, a bad profile's errors. */
#ifndef DTM_TEST_COST_UTIL_H
#define DTM_TEST_COST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/plan.h"
#include "tools/cost.h"
#include "tools/hw.h"

static void capture_start(FILE **f, char **buf, size_t *len)
{
	*buf = NULL;
	*len = 0;
	*f = open_memstream(buf, len);
}

/* A plan of one stage on a 1-D mesh dp of one rank whose one action is an
 * n x n x n GEMM of buffers b[0..2] (bytes each, of type dt), in *p, *a
 * and *s (the caller's, which must outlive p). */
static void one_gemm_plan(DtmPlan *p, DtmBuffer *b, DtmAction *a, DtmStage *s, int64_t n,
                          int64_t bytes, DtmDtype dt)
{
	for (int i = 0; i < 3; i++)
		b[i] = (DtmBuffer){.bytes = bytes, .dtype = dt};
	*a = (DtmAction){.kind = DTM_ACT_GEMM, .nargs = 3, .args = {0, 1, 2}, .m = n, .n = n, .k = n};
	*s = (DtmStage){.nactions = 1, .actions = a};
	*p = (DtmPlan){.version = DTM_PLAN_VERSION, .mesh_naxes = 1, .mesh_names = {"dp"},
	               .mesh_sizes = {1}, .nbuffers = 3, .buffers = b, .nstages = 1, .stages = s,
	               .train = {.microbatches = 1, .precision = dt}};
}

/* h printed as calibrate writes it and read back into *r (from h100's). */
static void reprint(const HwProfile *h, HwProfile *r)
{
	FILE *f;
	char *out;
	size_t len;
	capture_start(&f, &out, &len);
	hw_print(f, h);
	fclose(f);
	*r = *hw_builtin("h100");
	CHECK_EQ_INT(hw_parse_overrides(r, out, len, "print.hw", stderr), 0);
	free(out);
}

/* The errors of parsing bad into *r (want of them), as printed; the
 * caller frees them. */
static char *parse_errors(HwProfile *r, const char *bad, int want)
{
	FILE *f;
	char *out;
	size_t len;
	capture_start(&f, &out, &len);
	CHECK_EQ_INT(hw_parse_overrides(r, bad, strlen(bad), "bad.hw", f), want);
	fclose(f);
	return out;
}

/* p's step time on h (cost_plan_step on one node); -1 when it fails. */
static inline double plan_step_s(const DtmPlan *p, const HwProfile *h)
{
	CostReport rep;
	if (cost_plan_step(p, h, 1, &rep) != 0)
		return -1;
	double s = rep.step_s;
	cost_report_free(&rep);
	return s;
}

#endif
