/* link.c - `dtmc build`: plans memory, writes the C file, runs the system C
 * compiler and links the runtime into one executable.
 *
 * Consumes the final IR with its fusion and memory plans and its Plan, as
 * the driver computed them (driver/driver.h).
 *
 * Outputs never exist half-written: the C goes to OUTPUT.dtm.c.tmp and the
 * executable to OUTPUT.tmp.PID, renamed to OUTPUT only after cc succeeded.
 * A failed compile keeps the C (as OUTPUT.dtm.c) and names it, since a
 * compile error there is a code generator bug someone must read.
 *
 * The repository root (for #include "runtime/plan.h") and the runtime
 * library with the support library under it come from compile definitions
 * CMake sets (DTM_SOURCE_DIR, DTM_RUNTIME_LIB, DTM_SUPPORT_LIB,
 * DTM_BLAS_LIB), so the installed dtmc needs no
 * environment.  When CMake built the mpi backend it also sets DTM_MPI_OBJ
 * (comm_mpi.o) and DTM_MPI_LIBS (MPI's libraries, '|'-separated): the
 * binary then runs `--backend mpi` under mpirun, and still runs the local
 * backend without it (MPI is initialised only when asked for).  Where CMake
 * built the cuda device it sets DTM_CUDA_LIB (libdtm_runtime_cuda.a) and
 * DTM_CUDA_LIBS (cudart, NVRTC, cuBLAS, NCCL and their run paths): the
 * binary then runs `--device cuda`, and still the CPU by default.  cc is run with fork/execvp, never through a shell, so paths
 * with spaces or quotes are safe.
 */
#include "codegen/link.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "passes/fuse.h"
#include "passes/memplan.h"
#include "codegen/emit_c.h"

#ifndef DTM_SOURCE_DIR
#define DTM_SOURCE_DIR "."
#endif
#ifndef DTM_RUNTIME_LIB
#define DTM_RUNTIME_LIB "libdtm_runtime.a"
#endif
#ifndef DTM_SUPPORT_LIB
#define DTM_SUPPORT_LIB "libdtm_support.a"
#endif
#ifndef DTM_BLAS_LIB
#define DTM_BLAS_LIB ""
#endif
#ifndef DTM_DNNL_LIBS
#define DTM_DNNL_LIBS ""
#endif
#ifndef DTM_MPI_OBJ
#define DTM_MPI_OBJ ""
#endif
#ifndef DTM_MPI_LIBS
#define DTM_MPI_LIBS ""
#endif
#ifndef DTM_CUDA_LIB
#define DTM_CUDA_LIB ""
#endif
#ifndef DTM_CUDA_LIBS
#define DTM_CUDA_LIBS ""
#endif

#define CG_MAX_ARGV 64

/* Appends the '|'-separated items of list to argv (copies in a). */
static int add_list(Arena *a, char **argv, int n, const char *list)
{
	for (const char *p = list; *p && n < CG_MAX_ARGV - 8;) {
		const char *q = strchr(p, '|');
		size_t len = q ? (size_t)(q - p) : strlen(p);
		if (len)
			argv[n++] = arena_printf(a, "%.*s", (int)len, p);
		p += len + (q != NULL);
	}
	return n;
}

/* Runs argv; returns its exit status, or -1 when it could not start. */
static int run_cmd(char *const *argv)
{
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		execvp(argv[0], argv);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

void cg_report_memory(FILE *out, const MemPlan *mp)
{
	int64_t tot = 0;
	fprintf(out, "dtmc: planned memory per arena:\n");
	for (int k = 0; k < MEMPLAN_ARENA_COUNT; k++) {
		fprintf(out, "  %-6s %12lld bytes\n", pass_memplan_arena_name(k),
		        (long long)mp->arena_bytes[k]);
		tot += mp->arena_bytes[k];
	}
	fprintf(out, "  total  %12lld bytes (activations without reuse: %lld)\n",
	        (long long)tot, (long long)mp->act_unshared);
}

bool cg_build(const IrModule *m, const FusePlan *fp, const MemPlan *mp, const DtmPlan *p,
              const CgBuildOptions *opt, Diag *d)
{
	Arena a;
	arena_init(&a);
	bool ok = true;
	const char *outp = opt->output;
	char *cpath = arena_printf(&a, "%s.dtm.c.tmp", outp);
	char *kept = arena_printf(&a, "%s.dtm.c", outp);
	char *tmpexe = arena_printf(&a, "%s.tmp.%ld", outp, (long)getpid());
	FILE *f = cpath ? fopen(cpath, "w") : NULL;
	if (!f) {
		diag_error(d, (SrcLoc){0}, "cannot write '%s': %s", cpath ? cpath : outp,
		           strerror(errno));
		arena_free(&a);
		return false;
	}
	CgEmitOptions eo = { .src_dir = DTM_SOURCE_DIR, .cuda = opt->cuda };
	ok = cg_emit_c(f, m, fp, mp, p, &eo, d);
	if (fclose(f) != 0 && ok) {
		diag_error(d, (SrcLoc){0}, "cannot write '%s'", cpath);
		ok = false;
	}
	if (!ok) {
		unlink(cpath);
		arena_free(&a);
		return false;
	}
	const char *cc = getenv("CC");
	if (!cc || !*cc)
		cc = "cc";
	char *inc = arena_printf(&a, "-I%s", DTM_SOURCE_DIR);
	char *argv[CG_MAX_ARGV];
	int n = 0;
	argv[n++] = (char *)cc;
	/* -O3 and these math flags let gcc vectorise the kernels' float
	 * reductions and call expf without errno (about 1.4x on a GPT step).
	 * Never -ffast-math: -ffinite-math-only would fold away the isnan
	 * checks --check-numerics and the loss check rely on.  Reassociation
	 * changes a sum's rounding against the reference interpreter's, but
	 * one binary on one machine gives the same bits from run to run and
	 * for every --threads: a kernel's reductions run per item or per chunk
	 * of a size fixed by the shape, combined in order (codegen/cpu/dtmk.h,
	 * dtmk_par), and a GEMM is cut into blocks fixed by its shape, each one
	 * single-threaded BLAS call (runtime/dev_cpu.c); tests/e2e/threads.sh
	 * checks it.  Another machine may give other bits: -march=native and
	 * the BLAS kernels chosen for the CPU (OpenBLAS's DYNAMIC_ARCH) differ
	 * with the CPU model, not with its core count. */
	argv[n++] = "-O3";
	argv[n++] = "-fno-math-errno";
	argv[n++] = "-fassociative-math";
	argv[n++] = "-fno-signed-zeros";
	argv[n++] = "-fno-trapping-math";
	argv[n++] = "-ffp-contract=fast"; /* -std=c11 would turn FMA contraction off */
	argv[n++] = "-march=native";
	argv[n++] = "-std=c11";
	argv[n++] = "-D_POSIX_C_SOURCE=200809L";
	argv[n++] = inc;
	argv[n++] = "-o";
	argv[n++] = tmpexe;
	argv[n++] = "-x";
	argv[n++] = "c";
	argv[n++] = cpath;
	argv[n++] = "-x";
	argv[n++] = "none";
	/* the mpi object before the runtime: it calls into it */
	n = add_list(&a, argv, n, DTM_MPI_OBJ);
	/* the cuda device likewise; the runtime refers to it only weakly,
	 * which pulls nothing out of an archive, hence -u */
	if (DTM_CUDA_LIB[0]) {
		argv[n++] = "-Wl,-u,rt_cuda_probe";
		argv[n++] = "-Wl,-u,rt_cuda_attach";
		argv[n++] = DTM_CUDA_LIB;
	}
	argv[n++] = DTM_KERNELS_LIB; /* the kernels the wrappers call (codegen/cpu/dtmk_lib.c) */
	argv[n++] = DTM_RUNTIME_LIB;
	argv[n++] = DTM_SUPPORT_LIB; /* after the runtime: it calls into it */
	if (DTM_BLAS_LIB[0])
		argv[n++] = DTM_BLAS_LIB;
	n = add_list(&a, argv, n, DTM_DNNL_LIBS);
	n = add_list(&a, argv, n, DTM_MPI_LIBS);
	n = add_list(&a, argv, n, DTM_CUDA_LIBS);
	argv[n++] = "-lpthread";
	argv[n++] = "-lm";
	argv[n] = NULL;
	if (opt->verbose) {
		fputs("dtmc:", stderr);
		for (int i = 0; i < n; i++)
			fprintf(stderr, " %s", argv[i]);
		fputc('\n', stderr);
	}
	int rc = run_cmd(argv);
	if (rc != 0) {
		rename(cpath, kept);
		unlink(tmpexe);
		if (rc < 0 || rc == 127)
			diag_error(d, (SrcLoc){0}, "could not run the C compiler '%s'", cc);
		else
			diag_error(d, (SrcLoc){0},
			           "the C compiler failed (status %d) on the generated C, kept as "
			           "'%s': this is a dtmc bug, please report it with that file",
			           rc, kept);
		arena_free(&a);
		return false;
	}
	if (rename(tmpexe, outp) != 0) {
		diag_error(d, (SrcLoc){0}, "cannot rename '%s' to '%s': %s", tmpexe, outp,
		           strerror(errno));
		unlink(tmpexe);
		ok = false;
	}
	if (opt->keep_c)
		rename(cpath, kept);
	else
		unlink(cpath);
	if (ok && opt->verbose)
		fprintf(stderr, "dtmc: wrote %s%s%s\n", outp, opt->keep_c ? " and " : "",
		        opt->keep_c ? kept : "");
	arena_free(&a);
	return ok;
}

const char *cg_source_dir(void)
{
	return DTM_SOURCE_DIR;
}
