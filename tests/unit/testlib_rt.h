/* testlib_rt.h - helpers the runtime's unit tests share: a temporary
 * folder and paths in it, whole-file writes and reads, llm.c token files,
 * folder listing and removal, and dtm_main run with its standard error
 * captured.  static inline, so a test that uses none pays nothing.
 *
 * A test sets tmpdir (mkdtemp) in main before using any of them. */
#ifndef DTM_TESTLIB_RT_H
#define DTM_TESTLIB_RT_H

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "runtime/plan.h"
#include "testlib.h"

static char tmpdir[256];

/* tmpdir/name; the last 16 results stay valid. */
static inline char *tpath(const char *name)
{
	static char buf[16][512];
	static int k;
	char *b = buf[k++ % 16];
	snprintf(b, 512, "%s/%s", tmpdir, name);
	return b;
}

static inline void write_bytes(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	CHECK(f != NULL);
	if (!f)
		return;
	CHECK(fwrite(p, 1, n, f) == n);
	fclose(f);
}

/* The whole file (malloc'ed) and its size, or NULL. */
static inline unsigned char *read_bytes(const char *path, size_t *n)
{
	return (unsigned char *)slurp_size(path, n);
}

/* An llm.c token file: a 256-int header (magic, version, the token count
 * it claims) and ntok uint16 tokens. */
static inline void write_tokfile(const char *path, int32_t magic, int32_t version,
                                 int32_t ntok_hdr, const uint16_t *tok, int ntok)
{
	int32_t hdr[256] = {0};
	hdr[0] = magic;
	hdr[1] = version;
	hdr[2] = ntok_hdr;
	FILE *f = fopen(path, "wb");
	CHECK(f != NULL);
	if (!f)
		return;
	CHECK(fwrite(hdr, 4, 256, f) == 256);
	if (ntok)
		CHECK(fwrite(tok, 2, (size_t)ntok, f) == (size_t)ntok);
	fclose(f);
}

/* The entries of dir whose name contains needle; -1: no such folder. */
static inline int count_entries(const char *dir, const char *needle)
{
	DIR *d = opendir(dir);
	int n = 0;
	if (!d)
		return -1;
	struct dirent *e;
	while ((e = readdir(d)))
		n += strstr(e->d_name, needle) != NULL;
	closedir(d);
	return n;
}

/* rm -r path */
static inline void rm_tree(const char *path)
{
	DIR *d = opendir(path);
	if (!d) {
		unlink(path);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char sub[1024];
		int n = snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
		if (n > 0 && (size_t)n < sizeof sub)
			rm_tree(sub);
	}
	closedir(d);
	rmdir(path);
}

/* dtm_main on p with a NULL-terminated argument list (argv[0] the plan's
 * model name); standard error goes to tmpdir/stderr.txt, read back with
 * read_stderr. */
static inline int run(const DtmPlan *p, ...)
{
	char *argv[32];
	int argc = 0;
	va_list ap;
	argv[argc++] = (char *)p->model;
	va_start(ap, p);
	for (char *a; (a = va_arg(ap, char *)) && argc < 31;)
		argv[argc++] = a;
	va_end(ap);
	argv[argc] = NULL;
	fflush(stderr);
	int saved = dup(2), fd = open(tpath("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, 2);
	close(fd);
	int rc = dtm_main(p, argc, argv);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	return rc;
}

static inline char *read_stderr(void)
{
	return slurp(tpath("stderr.txt"));
}

#endif
