/* fsio.c - temporary-name + fsync + rename writes; see fsio.h. */
#include "runtime/fsio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Test-only fault injection (see fsio.h); never set in production. */
static RtFaultHook fault_hook;
static void *fault_ctx;

void rt_set_fault_hook(RtFaultHook hook, void *ctx)
{
	fault_hook = hook;
	fault_ctx = ctx;
}

static int errf(char *err, size_t errlen, const char *what, const char *path, int e)
{
	if (err && errlen)
		snprintf(err, errlen, "%s %s: %s", what, path, strerror(e));
	return -1;
}

int rt_afile_open(RtAtomicFile *af, const char *final_path, char *err, size_t errlen)
{
	memset(af, 0, sizeof *af);
	size_t n = strlen(final_path);
	if (n == 0 || n + 16 > sizeof af->tmp_path) {
		if (err && errlen)
			snprintf(err, errlen, "path too long or empty: %.200s", final_path);
		return -1;
	}
	memcpy(af->final_path, final_path, n + 1);
	snprintf(af->tmp_path, sizeof af->tmp_path, "%s.tmp.XXXXXX", final_path);
	int fd = mkstemp(af->tmp_path);
	if (fd < 0) {
		int e = errno;
		af->tmp_path[0] = '\0';
		return errf(err, errlen, "cannot create a temporary file for", final_path, e);
	}
	/* mkstemp makes 0600; a checkpoint should be as readable as any file */
	mode_t um = umask(0);
	umask(um);
	(void)fchmod(fd, 0666 & ~um);
	af->f = fdopen(fd, "wb");
	if (!af->f) {
		int e = errno;
		close(fd);
		unlink(af->tmp_path);
		af->tmp_path[0] = '\0';
		return errf(err, errlen, "cannot open", final_path, e);
	}
	return 0;
}

int rt_afile_write(RtAtomicFile *af, const void *p, size_t n, char *err, size_t errlen)
{
	if (!af->f)
		return errf(err, errlen, "write to a closed file", af->final_path, EBADF);
	if (fault_hook && fault_hook(af->tmp_path, af->written, n, fault_ctx))
		return errf(err, errlen, "cannot write", af->tmp_path, EIO);
	errno = 0;
	if (n && fwrite(p, 1, n, af->f) != n)
		return errf(err, errlen, "cannot write", af->tmp_path, errno ? errno : EIO);
	af->written += n;
	return 0;
}

void rt_afile_abort(RtAtomicFile *af)
{
	if (af->f) {
		fclose(af->f);
		af->f = NULL;
	}
	if (af->tmp_path[0]) {
		unlink(af->tmp_path);
		af->tmp_path[0] = '\0';
	}
}

int rt_fsync_parent(const char *path, char *err, size_t errlen)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');
	if (!slash) {
		strcpy(dir, ".");
	} else if (slash == path) {
		strcpy(dir, "/");
	} else {
		size_t n = (size_t)(slash - path);
		if (n >= sizeof dir)
			n = sizeof dir - 1;
		memcpy(dir, path, n);
		dir[n] = '\0';
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return errf(err, errlen, "cannot open directory", dir, errno);
	int rc = fsync(fd);
	int e = errno;
	close(fd);
	/* some file systems (and some containers) refuse fsync on a
	 * directory; the data itself is already durable, so only real I/O
	 * errors count */
	if (rc != 0 && e != EINVAL && e != EROFS && e != EBADF)
		return errf(err, errlen, "cannot fsync directory", dir, e);
	return 0;
}

int rt_afile_commit(RtAtomicFile *af, char *err, size_t errlen)
{
	if (!af->f)
		return errf(err, errlen, "commit of a closed file", af->final_path, EBADF);
	if (fflush(af->f) != 0) {
		int e = errno;
		rt_afile_abort(af);
		return errf(err, errlen, "cannot write", af->final_path, e);
	}
	if (fsync(fileno(af->f)) != 0) {
		int e = errno;
		rt_afile_abort(af);
		return errf(err, errlen, "cannot fsync", af->final_path, e);
	}
	FILE *f = af->f;
	af->f = NULL;
	if (fclose(f) != 0) {
		int e = errno;
		rt_afile_abort(af);
		return errf(err, errlen, "cannot close", af->final_path, e);
	}
	if (rename(af->tmp_path, af->final_path) != 0) {
		int e = errno;
		rt_afile_abort(af);
		return errf(err, errlen, "cannot rename into", af->final_path, e);
	}
	af->tmp_path[0] = '\0';
	return rt_fsync_parent(af->final_path, err, errlen);
}

int rt_write_file_atomic(const char *path, const void *p, size_t n, char *err, size_t errlen)
{
	RtAtomicFile af;
	if (rt_afile_open(&af, path, err, errlen))
		return -1;
	if (rt_afile_write(&af, p, n, err, errlen)) {
		rt_afile_abort(&af);
		return -1;
	}
	return rt_afile_commit(&af, err, errlen);
}

int rt_read_file(const char *path, char **out, size_t *len, size_t max_len, char *err,
                 size_t errlen)
{
	*out = NULL;
	*len = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return errf(err, errlen, "cannot open", path, errno);
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap + 1);
	if (!buf) {
		fclose(f);
		return errf(err, errlen, "cannot read", path, ENOMEM);
	}
	for (;;) {
		if (n == cap) {
			if (cap >= max_len) {
				free(buf);
				fclose(f);
				if (err && errlen)
					snprintf(err, errlen, "%s: file larger than %zu bytes",
					         path, max_len);
				return -1;
			}
			cap *= 2;
			char *nb = realloc(buf, cap + 1);
			if (!nb) {
				free(buf);
				fclose(f);
				return errf(err, errlen, "cannot read", path, ENOMEM);
			}
			buf = nb;
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(buf);
		return errf(err, errlen, "cannot read", path, EIO);
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

int rt_mkdirs(const char *path, char *err, size_t errlen)
{
	char tmp[4096];
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof tmp) {
		if (err && errlen)
			snprintf(err, errlen, "bad directory path: %.200s", path);
		return -1;
	}
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
			return errf(err, errlen, "cannot create directory", tmp, errno);
		*p = '/';
	}
	if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
		return errf(err, errlen, "cannot create directory", tmp, errno);
	struct stat st;
	if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode))
		return errf(err, errlen, "not a directory:", tmp, ENOTDIR);
	return 0;
}
