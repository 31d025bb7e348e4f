/* fuzz_mlir.c - libFuzzer target for `dtmc import-mlir` (tools/mlir_import.c).
 *
 * The bytes are an MLIR module.  One MLIR parses and verifies (checked in a
 * child: MLIR 19's own parser crashes on some malformed input) goes through
 * the plugin's import, which parses it again and walks it into dtm IR text, which ir_parse reads and the
 * verifier checks, as `dtmc build X.mlir` does.  Errors are fine (MLIR's,
 * the import's "LINE:COL: message" lines, the IR parser's); a crash, a
 * sanitizer report in dtm's code, an internal error (diag_internal) or
 * text the IR parser finds no module in are findings.  Seeds: the shipped
 * models' exports, the .mlir files of tests/mlir (tests/fuzz/run.sh).  Built only where
 * MLIR 19 is (tests/fuzz/CMakeLists.txt).
 */
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ir/ir.h"
#include "tools/mlir.h"

/* MLIR parses and verifies src without crashing: checked in a child
 * process, since MLIR 19's parser crashes on some malformed modules (as
 * mlir-opt-19 does: not dtm's to find; dtmc parses in a child too). */
static bool mlir_takes(const char *src)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		/* the child dies of MLIR's crash as it would alone: without
		 * this, the parent's libFuzzer and ASan handlers it inherits
		 * report the crash and write it out as a finding */
		static const int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE, SIGTRAP};
		for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
			signal(sigs[i], SIG_DFL);
		char *out = NULL, *err = NULL;
		_exit(dtm_mlir_api()->check(src, &out, &err) == 0 ? 0 : 1);
	}
	int st = 0;
	while (pid > 0 && waitpid(pid, &st, 0) < 0)
		;
	return pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *src = malloc(size + 1);
	if (!src)
		return 0;
	memcpy(src, data, size);
	src[size] = 0;
	if (!mlir_takes(src)) {
		free(src);
		return 0;
	}
	char *ir = NULL, *err = NULL;
	int rc = dtm_mlir_api()->import(src, "fuzz.mlir", &ir, &err);
	free(src);
	if (rc != 0) {
		if (!err)
			abort(); /* a failure says why */
		free(err);
		free(ir);
		return 0;
	}
	Arena a;
	arena_init(&a);
	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, mem);
	SrcFile sf = {.name = "fuzz.mlir (as IR text)", .text = ir, .len = strlen(ir)};
	IrModule *m = ir_parse(&a, &d, &sf);
	if (m && d.nerr == 0)
		ir_verify(m, &d, "lower");
	fclose(mem);
	if (d.ninternal > 0)
		abort();
	/* the import writes what the parser reads: an error of the parser's
	 * own is the import's bug, unless MLIR let through a shape or a value
	 * the program's own rules refuse (the verifier says so then) */
	if (!m && d.nerr == 0)
		abort();
	free(buf);
	free(ir);
	arena_free(&a);
	return 0;
}
