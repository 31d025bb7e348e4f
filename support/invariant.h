/* invariant.h - internal invariants: DTM_ASSERT names file and line, then
 * aborts.  Never for anything a user can trigger: those are diagnostics
 * (support/diag.h), and invariants a phase can report and back off from are
 * diag_internal's. */
#ifndef DTM_SUPPORT_INVARIANT_H
#define DTM_SUPPORT_INVARIANT_H

#define DTM_ASSERT(c)                                                          \
	((c) ? (void)0 : dtm_assert_fail(#c, __FILE__, __LINE__))
void dtm_assert_fail(const char *expr, const char *file, int line);

#endif
