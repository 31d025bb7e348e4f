/* fuzz_frontend.c - libFuzzer targets for the front end and the IR parser.
 *
 * Built twice by tests/fuzz/CMakeLists.txt:
 *   fuzz_frontend  the bytes are a .dtm file: ast_parse, then lower_file; a
 *                  module that lowers is verified and must round-trip
 *                  through its text form (print, parse, print: identical).
 *   fuzz_ir        (FUZZ_IR) the bytes are IR text: ir_parse; a module that
 *                  parses is verified and must round-trip likewise.
 * Then both do what `dtmc check` does (pass_check_input) and, on a module
 * that checks and is small enough to compile in a moment, what `dtmc build`
 * does before codegen: the whole pass pipeline from where the module
 * stands.  Errors are fine, an internal one is not: one reported with
 * diag_internal (counted in Diag.ninternal: "internal error: ...", which
 * includes a pass leaving IR the verifier refuses) aborts.
 * Diagnostics go to a memory buffer that is scanned, then dropped; each
 * input gets a fresh arena, freed after it, so a leak or an overflow shows
 * up under ASan at the input that caused it.  Any crash, sanitizer report,
 * timeout or memory blow-up is a finding.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "frontend/lower.h"
#include "ir/ir.h"
#include "passes/passes.h"

/* The pipeline runs on modules up to this size: the fuzzer looks for
 * wrong answers, not for programs that take long to compile. */
enum { PIPELINE_MAX_NODES = 3000, PIPELINE_MAX_RANKS = 64, PIPELINE_MAX_MB = 8 };

/* Prints m into a malloc'd buffer (NUL-terminated); *len gets its length. */
static char *print_to_string(const IrModule *m, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	ir_print(f, m);
	fclose(f);
	return buf;
}

/* print -> parse -> print must give the same text (DESIGN.md: every pass is
 * testable on its own because the text form round-trips exactly). */
static void check_round_trip(const IrModule *m, Diag *d)
{
	size_t len1 = 0, len2 = 0;
	char *t1 = print_to_string(m, &len1);
	if (!t1)
		return;
	Arena a2;
	arena_init(&a2);
	SrcFile src = {.name = "roundtrip.ir", .text = t1, .len = len1};
	Diag d2;
	diag_init(&d2, d->out);
	diag_add_file(&d2, &src);
	IrModule *m2 = ir_parse(&a2, &d2, &src);
	if (!m2 || d2.nerr > 0) {
		fprintf(stderr, "round trip: the printed IR does not parse back:\n%s\n", t1);
		abort();
	}
	char *t2 = print_to_string(m2, &len2);
	if (t2 && (len1 != len2 || memcmp(t1, t2, len1) != 0)) {
		fprintf(stderr,
		        "round trip: print differs after parse:\n--- first\n%s\n"
		        "--- second\n%s\n",
		        t1, t2);
		abort();
	}
	free(t2);
	arena_free(&a2);
	free(t1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *diags = NULL;
	size_t ndiags = 0;
	FILE *out = open_memstream(&diags, &ndiags);
	if (!out)
		return 0;
	Arena a;
	arena_init(&a);
	char *text = arena_alloc(&a, size + 1);
	if (!text) {
		arena_free(&a);
		fclose(out);
		free(diags);
		return 0;
	}
	memcpy(text, data, size);
	text[size] = 0;
	Diag d;
	diag_init(&d, out);
#ifdef FUZZ_IR
	SrcFile src = {.name = "fuzz.ir", .text = text, .len = size};
	diag_add_file(&d, &src);
	IrModule *m = ir_parse(&a, &d, &src);
#else
	SrcFile src = {.name = "fuzz.dtm", .text = text, .len = size};
	diag_add_file(&d, &src);
	AstFile f = {0};
	IrModule *m = NULL;
	if (ast_parse(&a, &d, &src, &f) && d.nerr == 0) {
		LowerOptions opt = {0};
		m = lower_file(&a, &d, &f, &opt);
	}
#endif
	if (m && d.nerr == 0 && ir_verify(m, &d, "fuzz")) {
		check_round_trip(m, &d);
		if (pass_check_input(m, &d) && m->nnodes <= PIPELINE_MAX_NODES &&
		    mesh_size(&m->mesh) <= PIPELINE_MAX_RANKS &&
		    m->train.microbatches <= PIPELINE_MAX_MB)
			pass_run_until(m, &d, NULL, NULL);
	}
	arena_free(&a);
	fclose(out);
	if (d.ninternal > 0) {
		fprintf(stderr, "an internal error (a compiler fault, not the input's):\n%s\n",
		        diags ? diags : "");
		abort();
	}
	free(diags);
	return 0;
}
