/* mlir_load.c - finding the MLIR plugin (tools/mlir.h). */
#include "tools/mlir.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
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
