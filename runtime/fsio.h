/* fsio.h - crash-safe file writes for checkpoints and token files.
 *
 * A file that a later run reads (a checkpoint, `latest`, a token file) must
 * never be seen half-written: a crash, a full disk or a killed job has to
 * leave either the old file or the new one.  RtAtomicFile writes to a
 * temporary name in the same directory (mkstemp, so concurrent writers do
 * not collide), and commit does fflush, fsync, fclose, rename over the final
 * name, then fsyncs the directory so the rename itself is durable.  Any
 * failure removes the temporary file and reports the path and strerror.
 */
#ifndef DTM_RT_FSIO_H
#define DTM_RT_FSIO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct RtAtomicFile {
	FILE *f;
	char final_path[4096];
	char tmp_path[4096];
	uint64_t written; /* bytes written so far, for the fault hook */
} RtAtomicFile;

/* Opens DIR/BASENAME.tmp.XXXXXX for final_path.  0, or -1 with err. */
int rt_afile_open(RtAtomicFile *af, const char *final_path, char *err, size_t errlen);
/* Appends n bytes.  0, or -1 with err; after a failure call rt_afile_abort. */
int rt_afile_write(RtAtomicFile *af, const void *p, size_t n, char *err, size_t errlen);
/* Makes the file durable under its final name.  On failure the temporary
 * file is removed and the final path is untouched.  0, or -1 with err. */
int rt_afile_commit(RtAtomicFile *af, char *err, size_t errlen);
/* Closes and removes the temporary file (safe to call after a failure). */
void rt_afile_abort(RtAtomicFile *af);

/* Writes a whole buffer atomically to path. */
int rt_write_file_atomic(const char *path, const void *p, size_t n, char *err, size_t errlen);
/* Reads a whole (small) file; *out is malloc'd and NUL-terminated. */
int rt_read_file(const char *path, char **out, size_t *len, size_t max_len, char *err,
                 size_t errlen);
/* mkdir -p (mode 0777 before umask).  0, or -1 with err. */
int rt_mkdirs(const char *path, char *err, size_t errlen);
/* fsync the directory holding path (so a rename into it is durable). */
int rt_fsync_parent(const char *path, char *err, size_t errlen);

/* Test hook: when set, called before each write with the temporary path and
 * the offset the write starts at.  A non-zero return fails that write with
 * EIO, which is how tests simulate a disk failing mid-checkpoint.  A hook
 * may also _exit() to simulate a crash.  Process-wide; NULL clears it. */
typedef int (*RtFaultHook)(const char *tmp_path, uint64_t offset, size_t n, void *ctx);
void rt_set_fault_hook(RtFaultHook hook, void *ctx);

#endif
