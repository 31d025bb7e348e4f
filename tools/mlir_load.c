/* mlir_load.c - finding the MLIR plugin (tools/mlir.h). */
#include "tools/mlir.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char install_hint[] =
	"install Debian's libmlir-19-dev and mlir-19-tools (scripts/deps.sh does) and rebuild "
	"dtm: CMake then builds libdtm_mlir.so";

const DtmMlirApi *mlir_plugin(char *err, size_t cap)
{
	char path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
	if (n <= 0) {
		snprintf(err, cap, "cannot find dtmc's own directory to load libdtm_mlir.so");
		return NULL;
	}
	path[n] = 0;
	char *slash = strrchr(path, '/');
	strcpy(slash ? slash + 1 : path, "libdtm_mlir.so");
	if (access(path, R_OK) != 0) {
		snprintf(err, cap, "dtmc was built without MLIR (no %s): %s", path, install_hint);
		return NULL;
	}
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, cap, "cannot load %s: %s; %s", path, dlerror(), install_hint);
		return NULL;
	}
	const DtmMlirApi *(*get)(void) = (const DtmMlirApi *(*)(void))dlsym(h, "dtm_mlir_api");
	const DtmMlirApi *api = get ? get() : NULL;
	if (!api || api->version != DTM_MLIR_API_VERSION) {
		snprintf(err, cap, "%s is not this dtmc's MLIR plugin (rebuild dtm)", path);
		return NULL;
	}
	return api;
}

bool mlir_import_file(const SrcFile *src, char **ir, Diag *d)
{
	char err[1024];
	const DtmMlirApi *api = mlir_plugin(err, sizeof err);
	if (!api) {
		diag_error(d, (SrcLoc){.file = src->name}, "cannot read an MLIR model: %s", err);
		return false;
	}
	char *msgs = NULL;
	if (api->import(src->text, src->name, ir, &msgs) == 0) {
		free(msgs);
		return true;
	}
	/* "LINE:COL: message" lines, at the .mlir file's lines */
	for (char *l = msgs, *nl; l && *l; l = nl ? nl + 1 : NULL) {
		nl = strchr(l, '\n');
		if (nl)
			*nl = 0;
		int line = 0, col = 0, k = 0;
		sscanf(l, "%d:%d: %n", &line, &col, &k);
		diag_error(d, (SrcLoc){.file = src->name, .line = line, .col = col, .end_col = col},
		           "%s", l + k);
	}
	if (d->nerr == 0)
		diag_error(d, (SrcLoc){.file = src->name}, "MLIR rejected the module");
	free(msgs);
	*ir = NULL;
	return false;
}
