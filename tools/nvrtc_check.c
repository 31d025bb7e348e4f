/* nvrtc_check.c - compile CUDA sources with NVRTC to PTX, failing on any
 * error or warning (the CI check of the generated kernels; no GPU needed).
 *
 *   nvrtc_check [--arch compute_XY|sm_XY]... [-q] FILE.cu...
 *
 * Each FILE is compiled once per --arch (default: compute_80 and
 * compute_90, PTX; sm_XY makes a cubin, so ptxas runs too) with the
 * options the runtime uses (-std=c++17, -lineinfo, no include path: the
 * sources are self-contained).  NVRTC has no
 * -Werror, so a non-empty compile log counts as a failure and is printed.
 * The exit status is 0 when every compile was clean, 1 otherwise.  Built
 * only when CMake finds the CUDA toolkit's NVRTC (CMakeLists.txt); it is
 * not part of dtmc, which needs no CUDA.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvrtc.h>

#define MAX_ARCHS 8

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		size_t got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
		if (n + 1 < cap)
			break;
		char *nb = realloc(buf, cap * 2);
		if (!nb) {
			free(buf);
			buf = NULL;
			break;
		}
		buf = nb;
		cap *= 2;
	}
	bool bad = ferror(f);
	fclose(f);
	if (!buf || bad) {
		free(buf);
		return NULL;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

static bool blank(const char *s)
{
	for (; *s; s++)
		if (!isspace((unsigned char)*s))
			return false;
	return true;
}

/* Compiles src for arch; prints what went wrong; true when clean. */
static bool compile(const char *path, const char *src, const char *arch, bool quiet)
{
	nvrtcProgram prog;
	nvrtcResult r = nvrtcCreateProgram(&prog, src, path, 0, NULL, NULL);
	if (r != NVRTC_SUCCESS) {
		fprintf(stderr, "%s: nvrtcCreateProgram: %s\n", path, nvrtcGetErrorString(r));
		return false;
	}
	char archopt[64];
	snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
	const char *opts[] = {archopt, "-std=c++17", "-lineinfo"};
	nvrtcResult cr = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
	bool ok = cr == NVRTC_SUCCESS;
	size_t loglen = 0;
	if (nvrtcGetProgramLogSize(prog, &loglen) == NVRTC_SUCCESS && loglen > 1) {
		char *log = malloc(loglen);
		if (log && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS && !blank(log)) {
			fprintf(stderr, "%s (%s): NVRTC %s:\n%s\n", path, arch,
			        ok ? "warnings (treated as errors)" : "errors", log);
			ok = false;
		}
		free(log);
	}
	if (cr != NVRTC_SUCCESS) {
		fprintf(stderr, "%s (%s): nvrtcCompileProgram: %s\n", path, arch,
		        nvrtcGetErrorString(cr));
		ok = false;
	}
	/* compute_XY gives PTX; sm_XY a cubin (ptxas run too) */
	bool cubin = strncmp(arch, "sm_", 3) == 0;
	size_t len = 0;
	if (ok && ((cubin ? nvrtcGetCUBINSize(prog, &len) : nvrtcGetPTXSize(prog, &len)) !=
	                   NVRTC_SUCCESS ||
	           len <= 1)) {
		fprintf(stderr, "%s (%s): no %s produced\n", path, arch, cubin ? "cubin" : "PTX");
		ok = false;
	}
	if (ok && !quiet)
		printf("%s: %s ok (%zu bytes of %s)\n", path, arch, len, cubin ? "cubin" : "PTX");
	nvrtcDestroyProgram(&prog);
	return ok;
}

int main(int argc, char **argv)
{
	const char *archs[MAX_ARCHS];
	int narchs = 0, nfiles = 0, failed = 0;
	bool quiet = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc) {
			if (narchs < MAX_ARCHS)
				archs[narchs++] = argv[++i];
		} else if (strcmp(argv[i], "-q") == 0) {
			quiet = true;
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			puts("usage: nvrtc_check [--arch compute_XY|sm_XY]... [-q] FILE.cu...\n"
			     "Compiles each FILE with NVRTC to PTX (default archs compute_80 and\n"
			     "compute_90; sm_XY: a cubin); any error or warning fails (exit\n"
			     "status 1).");
			return 0;
		}
	}
	if (!narchs) {
		archs[narchs++] = "compute_80";
		archs[narchs++] = "compute_90";
	}
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--arch") == 0) {
			i++;
			continue;
		}
		if (argv[i][0] == '-')
			continue;
		nfiles++;
		size_t len;
		char *src = read_all(argv[i], &len);
		if (!src) {
			fprintf(stderr, "nvrtc_check: cannot read '%s'\n", argv[i]);
			failed++;
			continue;
		}
		for (int a = 0; a < narchs; a++)
			failed += !compile(argv[i], src, archs[a], quiet);
		free(src);
	}
	if (!nfiles) {
		fputs("nvrtc_check: no input files (see --help)\n", stderr);
		return 1;
	}
	return failed ? 1 : 0;
}
