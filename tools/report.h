/* report.h - the text reports dtmc prints about a module. */
#ifndef DTM_REPORT_H
#define DTM_REPORT_H

#include "ir/ir.h"

/* Writes v with thousands separators ("124,439,808") into buf (>= 32 bytes);
 * returns buf. */
char *report_count(char *buf, int64_t v);

/* The `dtmc check` summary: model, mesh and rank count, parameter count,
 * the train settings, and a table of params with dtype, global shape,
 * placement and elements per rank, with per-rank totals. */
void report_check(FILE *out, const IrModule *m);

#endif
