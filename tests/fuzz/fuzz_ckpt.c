/* fuzz_ckpt.c - libFuzzer target for the checkpoint readers (runtime/ckpt.c):
 * the safetensors reader every rank file goes through (--resume, `dtmc
 * ckpt`) and the index.json reader with the shard geometry a resume on
 * another layout computes from it.
 *
 * The bytes are tried as both: a safetensors file (dtm_st_open_memory, then
 * each tensor verified and read as f32) and an index (dtm_ckpt_index_parse,
 * then each tensor's layout and every rank's shard box).  Errors are fine;
 * a crash, a sanitizer report, or an accepted file that breaks the reader's
 * own promises is a finding: a tensor whose bytes are not its shape times
 * its dtype or lie outside the data section, an error with no message, a
 * shard box outside its tensor, or boxes of one tensor that do not add up
 * to it once (over the first copies).  Seeds: tests/fuzz/corpus/ckpt
 * (a dp=2 x tp=2 bf16 MLP's rank file and index, a pp=2 x dp=3 ZeRO-3
 * LLaMA's index). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ckpt.h"

static void check_safetensors(const uint8_t *data, size_t size)
{
	char err[512] = "";
	DtmSafetensors *st;
	if (dtm_st_open_memory(&st, data, size, "fuzz.safetensors", err, sizeof err)) {
		if (!err[0])
			abort(); /* refused without saying why */
		return;
	}
	for (int i = 0; i < dtm_st_count(st); i++) {
		const DtmStTensor *t = dtm_st_at(st, i);
		int64_t numel = 1;
		for (int d = 0; d < t->ndim; d++)
			numel *= t->shape[d];
		size_t esz = dtm_st_dtype_size(t->dtype);
		if ((uint64_t)numel != t->numel || (uint64_t)numel * esz != t->nbytes || t->nbytes > size ||
		    dtm_st_find(st, t->name) != t)
			abort();
		if (dtm_st_verify(t, "fuzz.safetensors", err, sizeof err))
			abort(); /* open checked every CRC already */
		float *f = malloc((size_t)numel * sizeof *f + 1);
		if (!f)
			abort();
		(void)dtm_st_read_f32(t, f);
		free(f);
	}
	dtm_st_close(st);
}

static void check_index(const uint8_t *data, size_t size)
{
	char err[512] = "";
	DtmCkptIndex ix;
	if (dtm_ckpt_index_parse((const char *)data, size, "fuzz.json", &ix, err, sizeof err)) {
		if (!err[0])
			abort();
		return;
	}
	int64_t world = 1;
	for (int a = 0; a < ix.naxes; a++)
		world *= ix.sizes[a];
	if (world != ix.nfiles)
		abort();
	for (int i = 0; i < ix.ntensors; i++) {
		DtmShardLayout l;
		if (dtm_ckpt_layout(&ix, &ix.tensors[i], &l, err, sizeof err)) {
			if (!err[0])
				abort();
			continue;
		}
		/* the boxes of the first copies tile the tensor: their volumes add
		 * up to its (every rank up to 4096; a bigger mesh only in part) */
		int64_t numel = 1, covered = 0;
		for (int d = 0; d < l.ndim; d++)
			numel *= l.shape[d];
		int64_t ranks = world < 4096 ? world : 4096;
		for (int64_t r = 0; r < ranks; r++) {
			int64_t coords[DTM_MAX_AXES], start[DTM_MAX_DIMS], len[DTM_MAX_DIMS];
			dtm_ckpt_rank_coords(&ix, r, coords);
			dtm_ckpt_shard_box(&l, ix.sizes, coords, start, len);
			int64_t vol = 1;
			for (int d = 0; d < l.ndim; d++) {
				if (start[d] < 0 || len[d] < 0 || start[d] + len[d] > l.shape[d])
					abort();
				vol *= len[d];
			}
			if (dtm_ckpt_first_copy(&l, ix.naxes, coords, -1))
				covered += vol;
		}
		if (ranks == world && covered != numel)
			abort();
	}
	dtm_ckpt_index_free(&ix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_safetensors(data, size);
	check_index(data, size);
	return 0;
}
