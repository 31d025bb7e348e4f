/* ckpt.h - checkpoints: safetensors files, a JSON index, and the
 * directory layout that makes saving crash-safe.
 *
 * Layout (one directory per saved step, one file per rank):
 *
 *   DIR/step_000010/rank00000.safetensors    tensors owned by rank 0
 *   DIR/step_000010/rank00001.safetensors    ...
 *   DIR/step_000010/index.json               mesh, files, global shapes, placements
 *   DIR/latest                               "step_000010\n"
 *
 * Every file is written to a temporary name, fsynced and renamed (fsio.h).
 * The order is: all rank files, then index.json, then latest.  A reader
 * trusts only what `latest` names, and `latest` changes only after the
 * step's index is durable, so a crash at any point leaves the previous
 * checkpoint complete and selected.  A partly written step directory is
 * harmless and is overwritten by the next save of that step.
 *
 * safetensors (https://huggingface.co/docs/safetensors): 8-byte
 * little-endian header size N, N bytes of JSON (padded with spaces so the
 * data starts 8-byte aligned), then the tensors back to back in the order
 * given.  PyTorch (safetensors.torch.load_file) reads these files directly.
 *
 * Integrity: dtm_st_write stores a CRC32C of each tensor's bytes in the
 * header's __metadata__ ("crc32c:NAME": "1a2b3c4d", 8 lowercase hex
 * digits; metadata values must be strings), and dtm_st_open checks every
 * checksum it finds, so a flipped bit in the data is an error naming the
 * file and the tensor.  Other readers ignore the extra metadata.  A file
 * without checksums (written elsewhere, or by dtm before them) still
 * opens; the checkpoint index says whether its files must have them.
 *
 * Errors: 0 on success, -1 with a message naming the path in err.
 */
#ifndef DTM_CKPT_H
#define DTM_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "support/float16.h" /* what dtm_st_read_f32 converts with */

typedef enum DtmStDtype {
	DTM_DT_F32,
	DTM_DT_BF16,
	DTM_DT_F16,
	DTM_DT_F64,
	DTM_DT_I32,
	DTM_DT_I64,
	DTM_DT_U8,
	DTM_DT_COUNT,
} DtmStDtype;

const char *dtm_st_dtype_name(DtmStDtype dt); /* safetensors spelling: "F32", ... */
size_t dtm_st_dtype_size(DtmStDtype dt);
int dtm_st_dtype_parse(const char *s, DtmStDtype *out); /* 0, or -1 if unknown */

#define DTM_CKPT_NONE 1 /* dtm_ckpt_find_latest: no checkpoint saved yet */
#define DTM_MAX_DIMS 8
/* Header sizes above this are refused (the reference implementation's
 * limit), so a corrupted size cannot make a reader allocate gigabytes. */
#define DTM_ST_MAX_HEADER (100u * 1024u * 1024u)

/* CRC32C (Castagnoli, as iSCSI and ext4 use it) of p[0..n), continuing
 * from crc (0 to start): dtm_crc32c(0, "123456789", 9) == 0xe3069283. */
uint32_t dtm_crc32c(uint32_t crc, const void *p, size_t n);

/* The metadata key prefix of a tensor's checksum; reserved for the
 * writer (dtm_st_write refuses caller metadata with it). */
#define DTM_ST_CRC_PREFIX "crc32c:"

/* ---- writing ---- */

typedef struct DtmTensorDesc {
	const char *name;
	DtmStDtype dtype;
	int ndim;
	int64_t shape[DTM_MAX_DIMS];
	const void *data; /* numel * dtype size bytes, row-major */
} DtmTensorDesc;

typedef struct DtmMetaKV {
	const char *key, *value;
} DtmMetaKV;

/* Writes a safetensors file atomically (never a half-written path), with
 * meta plus a checksum per tensor in __metadata__. */
int dtm_st_write(const char *path, const DtmTensorDesc *tensors, int ntensors,
                 const DtmMetaKV *meta, int nmeta, char *err, size_t errlen);

/* ---- reading ---- */

typedef struct DtmStTensor {
	const char *name;
	DtmStDtype dtype;
	int ndim;
	int64_t shape[DTM_MAX_DIMS];
	uint64_t numel;
	size_t nbytes;
	/* Points into the file's mapping: valid until dtm_st_close, and only
	 * as aligned as the file makes it, so read through memcpy or
	 * dtm_st_read_f32 rather than casting. */
	const void *data;
	bool has_crc32c; /* the file stored a checksum (matched, unless opened lazily) */
	bool crc_checked; /* ... and the data was compared with it */
	uint32_t crc32c;
} DtmStTensor;

typedef struct DtmSafetensors DtmSafetensors; /* an open file (opaque) */

/* Maps and validates the whole header: offsets in bounds, sizes matching
 * dtype and shape, tensors contiguous and not overlapping, names unique;
 * and every stored checksum against the data ("PATH: tensor NAME: data
 * does not match its checksum ..."). */
int dtm_st_open(DtmSafetensors **out, const char *path, char *err, size_t errlen);
/* As dtm_st_open, but with lazy the checksums are only read: a reader of
 * part of the file checks each tensor it uses with dtm_st_verify. */
int dtm_st_open_lazy(DtmSafetensors **out, const char *path, bool lazy, char *err,
                     size_t errlen);
/* t's bytes against its stored checksum (once; 0 when it has none). */
int dtm_st_verify(const DtmStTensor *t, const char *label, char *err, size_t errlen);
/* The same checks on a buffer (copied); label names it in messages. */
int dtm_st_open_memory(DtmSafetensors **out, const void *buf, size_t len, const char *label,
                       char *err, size_t errlen);
void dtm_st_close(DtmSafetensors *st);
int dtm_st_count(const DtmSafetensors *st);
const DtmStTensor *dtm_st_at(const DtmSafetensors *st, int i); /* in file order */
const DtmStTensor *dtm_st_find(const DtmSafetensors *st, const char *name);
const char *dtm_st_meta(const DtmSafetensors *st, const char *key); /* NULL if absent */
/* Converts F32/BF16/F16/F64 to f32 (dst holds t->numel floats). 0, or -1
 * for integer dtypes. */
int dtm_st_read_f32(const DtmStTensor *t, float *dst);

/* ---- index.json ---- */

/* index.json, as dtm_ckpt_index_write writes it and index_read demands:
 *
 *   {"format": "dtm-1", "step": 10, "seed": "1234",
 *    "mesh": {"axes": ["dp", "tp"], "sizes": [2, 2]},
 *    "files": ["rank00000.safetensors", ...],       one per rank, in order
 *    "checksum": "crc32c",                           optional
 *    "tensors": {"w1": {"dtype": "F32", "shape": [32, 64],
 *                       "placement": "[_, tp]"}, ...}}
 *
 * The reader refuses unknown or repeated fields, a file list that is not
 * rank00000.. for every rank of the mesh (one file for a mesh of one
 * rank: whole tensors), axis names that are not identifiers or repeat,
 * placements that do not parse, name an axis outside the mesh or have
 * another number of dims than the shape.  "checksum": "crc32c" says every
 * tensor of every file carries its CRC32C (absent in checkpoints written
 * before checksums existed). */
#define DTM_CKPT_FORMAT "dtm-1"
#define DTM_CKPT_CHECKSUM "crc32c"
#define DTM_MAX_AXES 8

typedef struct DtmIndexTensor {
	const char *name;
	const char *dtype; /* "F32", ...; required */
	int ndim;
	int64_t shape[DTM_MAX_DIMS]; /* global shape */
	const char *placement;       /* e.g. "[tp, _]"; optional */
} DtmIndexTensor;

typedef struct DtmCkptIndex {
	uint64_t step;
	uint64_t seed;
	int naxes;
	const char *axes[DTM_MAX_AXES];
	int64_t sizes[DTM_MAX_AXES];
	int nfiles;
	const char **files; /* file names relative to the step directory */
	const char *checksum; /* DTM_CKPT_CHECKSUM, or NULL: files without */
	int ntensors;
	DtmIndexTensor *tensors;
	void *priv; /* set by dtm_ckpt_index_read: owns the strings above */
} DtmCkptIndex;

int dtm_ckpt_index_write(const char *path, const DtmCkptIndex *ix, char *err, size_t errlen);
int dtm_ckpt_index_read(const char *path, DtmCkptIndex *ix, char *err, size_t errlen);
/* index_read on text in memory (len bytes; label names it in errors) */
int dtm_ckpt_index_parse(const char *text, size_t len, const char *label, DtmCkptIndex *ix,
                         char *err, size_t errlen);
void dtm_ckpt_index_free(DtmCkptIndex *ix); /* only for what index_read/parse filled */

/* ---- shard geometry: what each rank file holds of a tensor ---- */

/* A tensor's layout on the index's mesh: global shape and, per dim, the
 * mesh axes splitting it (major first), from its placement ("?" or none:
 * whole on every rank). */
typedef struct DtmShardLayout {
	int ndim;
	int64_t shape[DTM_MAX_DIMS];
	int nsplit[DTM_MAX_DIMS];
	int split[DTM_MAX_DIMS][DTM_MAX_AXES];
	bool partial; /* never saved: dtm_ckpt_layout refuses it */
} DtmShardLayout;

int dtm_ckpt_layout(const DtmCkptIndex *ix, const DtmIndexTensor *t, DtmShardLayout *out,
                    char *err, size_t errlen);
/* Rank's mesh coordinates (row-major, the last axis fastest). */
void dtm_ckpt_rank_coords(const DtmCkptIndex *ix, int64_t rank, int64_t *coords);
/* The box the shard at coords holds: per dim its global start and real
 * (unpadded) length, torch.chunk's sizes over the mixed-radix shard index
 * (the plan's rt_shard_start); sizes are the mesh's. */
void dtm_ckpt_shard_box(const DtmShardLayout *l, const int64_t *sizes, const int64_t *coords,
                        int64_t *start, int64_t *len);
/* coords holds the first copy of its shard: 0 on every axis of the naxes
 * that splits no dim of l, but skip_axis (the pipeline's, whose
 * coordinate says which files hold the tensor at all; -1: none). */
bool dtm_ckpt_first_copy(const DtmShardLayout *l, int naxes, const int64_t *coords, int skip_axis);
/* The index of the mesh axis named pp (the pipeline's), or -1. */
int dtm_ckpt_pp_axis(const DtmCkptIndex *ix);
/* File k holds a shard that is read: marks done[q] for every later file q
 * holding the same shard on another pp coordinate (its copies on the other
 * stages, for a tensor every stage keeps, such as a tied embedding). */
void dtm_ckpt_mark_copies(const DtmCkptIndex *ix, int pp, int64_t k, bool *done);
/* Copies the overlap of a source box (sstart, slen; src row-major of shape
 * slen, dtype sdt) into a destination box (dstart, dlen) of an array of
 * row-major shape dshape (dtype ddt; a padded shard's array is larger
 * than its box): the elements copied (0: no overlap), or -1 when the
 * dtypes do not convert (float to float only; else equal). */
int64_t dtm_ckpt_copy_overlap(int ndim, const void *src, DtmStDtype sdt, const int64_t *sstart,
                              const int64_t *slen, void *dst, DtmStDtype ddt,
                              const int64_t *dshape, const int64_t *dstart, const int64_t *dlen);

/* ---- directory layout ---- */

/* DIR/step_%06llu into out.  0, or -1 if it does not fit. */
int dtm_ckpt_step_dir(char *out, size_t n, const char *dir, uint64_t step);
/* "rank%05d.safetensors" into out. */
int dtm_ckpt_rank_file(char *out, size_t n, int rank);
/* Creates DIR/step_N (and DIR); the step directory path goes to out. */
int dtm_ckpt_begin_step(const char *dir, uint64_t step, char *out, size_t n, char *err,
                        size_t errlen);
/* After every rank's file of the step is written: writes index.json into
 * the step directory, then points DIR/latest at it (both atomic). */
int dtm_ckpt_commit_step(const char *dir, const DtmCkptIndex *ix, char *err, size_t errlen);
/* Reads DIR/latest: the step and its directory.  0, DTM_CKPT_NONE if DIR
 * holds no checkpoint yet, or -1 with err (e.g. latest names a step whose
 * index.json is missing). */
int dtm_ckpt_find_latest(const char *dir, uint64_t *step, char *step_dir, size_t n, char *err,
                         size_t errlen);

/* Single-device convenience: begin_step + rank00000.safetensors + commit
 * with a mesh of no axes and every tensor whole. */
int dtm_ckpt_save_single(const char *dir, uint64_t step, uint64_t seed,
                         const DtmTensorDesc *tensors, int ntensors, const DtmMetaKV *meta,
                         int nmeta, char *err, size_t errlen);

#endif
