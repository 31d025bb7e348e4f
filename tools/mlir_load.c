/* mlir_load.c - finding the MLIR plugin (tools/mlir.h). */
#include "tools/mlir.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

/* Writes s (NULL: none) to fd as its length + 1 (0 for NULL), then its
 * bytes. */
static void put_msg(int fd, const char *s)
{
	size_t n = s ? strlen(s) + 1 : 0;
	if (write(fd, &n, sizeof n) != (ssize_t)sizeof n || (n > 1 && write(fd, s, n - 1) < 0))
		_exit(2);
}

/* Reads what put_msg wrote at *p (of the end e) into a malloc'd string. */
static char *get_msg(const char **p, const char *e)
{
	size_t n;
	if ((size_t)(e - *p) < sizeof n)
		return NULL;
	memcpy(&n, *p, sizeof n);
	*p += sizeof n;
	if (!n || n - 1 > (size_t)(e - *p))
		return NULL;
	char *s = malloc(n);
	if (s) {
		memcpy(s, *p, n - 1);
		s[n - 1] = 0;
	}
	*p += n - 1;
	return s;
}

int mlir_in_child(const DtmMlirApi *api, MlirJob job, const void *arg, char **outs, int nouts)
{
	int fd[2];
	for (int i = 0; i < nouts; i++)
		outs[i] = NULL;
	if (pipe(fd) != 0)
		return job(api, arg, outs);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(fd[0]);
		int rc = job(api, arg, outs);
		if (write(fd[1], &rc, sizeof rc) != (ssize_t)sizeof rc)
			_exit(2);
		for (int i = 0; i < nouts; i++)
			put_msg(fd[1], outs[i]);
		_exit(0);
	}
	close(fd[1]);
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	char chunk[65536];
	ssize_t k;
	while (m && pid > 0 && (k = read(fd[0], chunk, sizeof chunk)) > 0)
		fwrite(chunk, 1, (size_t)k, m);
	close(fd[0]);
	if (m)
		fclose(m);
	int st = 0, rc = 1;
	while (pid > 0 && waitpid(pid, &st, 0) < 0)
		;
	if (pid > 0 && WIFEXITED(st) && !WEXITSTATUS(st) && len >= sizeof rc) {
		const char *p = buf + sizeof rc, *e = buf + len;
		memcpy(&rc, buf, sizeof rc);
		for (int i = 0; i < nouts; i++)
			outs[i] = get_msg(&p, e);
	} else if (nouts > 0 && (outs[nouts - 1] = malloc(64)) != NULL) {
		bool sig = pid > 0 && WIFSIGNALED(st);
		snprintf(outs[nouts - 1], 64, "MLIR crashed (%s %d)", sig ? "signal" : "status",
		         sig       ? WTERMSIG(st)
		         : pid > 0 ? WEXITSTATUS(st)
		                   : -1);
	}
	free(buf);
	return rc;
}

typedef struct ImportArg {
	const char *src, *path;
} ImportArg;

static int import_job(const DtmMlirApi *api, const void *arg, char **outs)
{
	const ImportArg *a = arg;
	return api->import(a->src, a->path, &outs[0], &outs[1]);
}

bool mlir_import_file(const SrcFile *src, char **ir, Diag *d)
{
	char err[1024];
	const DtmMlirApi *api = mlir_plugin(err, sizeof err);
	if (!api) {
		diag_error(d, (SrcLoc){.file = src->name}, "cannot read an MLIR model: %s", err);
		return false;
	}
	/* in a child: MLIR 19's parser crashes on some malformed modules */
	char *outs[2];
	ImportArg arg = {src->text, src->name};
	int rc = mlir_in_child(api, import_job, &arg, outs, 2);
	*ir = outs[0];
	char *msgs = outs[1];
	if (rc == 0 && *ir) {
		free(msgs);
		return true;
	}
	free(*ir);
	if (msgs && !strncmp(msgs, "MLIR crashed", 12)) {
		diag_error(d, (SrcLoc){.file = src->name}, "%s parsing the module, a fault of "
		           "MLIR 19's own on malformed input: fix the module's syntax "
		           "(`mlir-opt-19 %s` parses it the same way)", msgs, src->name);
		free(msgs);
		*ir = NULL;
		return false;
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
