/* emit_cuda.c - writes the CUDA kernels of a plan (see emit_cuda.h).
 *
 * Consumes the final IR with its FusePlan and MemPlan, like emit_c.c, and
 * walks the plan's kernels in the C back end's order (cg_plan_kernels),
 * so kernel k here is DtmPlan.kernels[k] there and a.p[j] is the action's
 * args[j].  The file it writes:
 *   DtmCudaArgs (runtime/plan.h's layout), then codegen/cuda/dtmk_cuda.cuh
 *   and the other codegen/cuda/dtmk_cuda_*.cuh, pasted in name order;
 *   per kernel, its __device__ scratch (multi-phase kernels: a DtmcSync
 *   and partial sums) and an extern "C" __global__ function named as the
 *   C wrapper (k_ID, or k_ID_CHUNK for a chunked grad_norm).
 * A fused elementwise group becomes a loop body, one statement per
 * member (emit_common.c writes them for both back ends); index
 * arithmetic of data movement (permute, slice, concat, pad, expand,
 * general reductions) is written with the shapes as constants; every
 * other op is a call of
 * a template of codegen/cuda/ with its dtypes and shapes.  The launch of
 * each kernel is decided next to its code, from the same numbers.  This
 * file holds the launch shapes, the writers and the file; the op emitters
 * are in emit_cuda_ops.c.
 */
#include "codegen/emit_cuda_impl.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- launch shapes ---- */

int64_t cg_cu_cdiv(int64_t a, int64_t b)
{
	return b > 0 ? (a + b - 1) / b : 0;
}

CgCudaKernel cg_cuda_launch_elementwise(int64_t n)
{
	return (CgCudaKernel){.threads = n > 0 ? n : 0, .block = CG_CUDA_BLOCK};
}

int cg_cuda_row_tpo(int64_t len)
{
	return len >= 1024 ? CG_CUDA_BLOCK : 32;
}

CgCudaKernel cg_cuda_launch_rows(int64_t rows, int64_t len)
{
	int64_t r = rows > 0 ? rows : 0;
	return (CgCudaKernel){.threads = r * cg_cuda_row_tpo(len), .block = CG_CUDA_BLOCK};
}

CgCudaKernel cg_cuda_launch_phased(int64_t items, int block, int smem_bytes)
{
	int64_t nb = items < CG_CUDA_MAX_BLOCKS ? items : CG_CUDA_MAX_BLOCKS;
	return (CgCudaKernel){
	        .threads = (nb > 0 ? nb : 1) * block, .block = block, .smem_bytes = smem_bytes};
}

int cg_cuda_attn_parts(int64_t hd)
{
	int p = 1;
	while (hd / p > 16 && hd % (2 * p) == 0 && p < 32)
		p *= 2;
	return p;
}

int cg_cuda_attn_tile(int64_t hd)
{
	int rows = CG_CUDA_ATTN_BLOCK / cg_cuda_attn_parts(hd);
	int bk = rows < 32 ? rows : 32;
	/* the larger (backward) use: 2 tiles of bk rows of hd, plus 3 * bk
	 * (row statistics and segment ids) */
	while (bk > 1 && (2 * bk * hd + 3 * bk) * 4 > CG_CUDA_MAX_SMEM)
		bk /= 2;
	return bk;
}

CgCudaKernel cg_cuda_launch_attention(int64_t B, int64_t T, int64_t D, int64_t H, bool bwd)
{
	int64_t hd = H > 0 ? D / H : D;
	int rows = CG_CUDA_ATTN_BLOCK / cg_cuda_attn_parts(hd), bk = cg_cuda_attn_tile(hd);
	int64_t items = B * H * cg_cu_cdiv(T, rows);
	if (!bwd)
		return (CgCudaKernel){.threads = items * CG_CUDA_ATTN_BLOCK,
		                      .block = CG_CUDA_ATTN_BLOCK,
		                      .smem_bytes = (int)((2 * bk * hd + bk) * 4)};
	return cg_cuda_launch_phased(3 * items, CG_CUDA_ATTN_BLOCK,
	                             (int)((2 * bk * hd + 3 * bk) * 4));
}

/* ---- small writers ---- */

const char *cg_cu_ctype(IrDtype t)
{
	switch (t) {
	case IR_BF16:
		return "dtmc_bf16";
	case IR_F16:
		return "dtmc_f16";
	case IR_I32:
		return "int";
	default:
		return "float";
	}
}

const IrNode *cg_cu_node(const CudaEmit *e, int id)
{
	return e->m->nodes[id];
}

void cg_cu_printf(CudaEmit *e, const char *fmt, ...)
{
	FILE *out = e->out;
	va_list ap;
	va_start(ap, fmt);
	for (const char *f = fmt; *f; f++) {
		if (*f != '%') {
			fputc(*f, out);
			continue;
		}
		switch (*++f) {
		case 'd': fprintf(out, "%d", va_arg(ap, int)); break;
		case 'u': fprintf(out, "%u", va_arg(ap, unsigned)); break;
		case 's': fputs(va_arg(ap, const char *), out); break;
		case '%': fputc('%', out); break;
		case 'D': fprintf(out, "%lld", (long long)va_arg(ap, int64_t)); break;
		case 'L': fprintf(out, "%lldLL", (long long)va_arg(ap, int64_t)); break;
		case 'U': fprintf(out, "%lldu", (long long)va_arg(ap, int64_t)); break;
		case 'F': cg_cu_put_f32(out, va_arg(ap, double)); break;
		case 'G': cg_cu_put_f64(out, va_arg(ap, double)); break;
		case 'N': fputs(e->name, out); break;
		case 'I': cg_cu_put_ptr(e, va_arg(ap, int), true); break;
		case 'W': cg_cu_put_ptr(e, va_arg(ap, int), false); break;
		case 'O': cg_cu_put_out(e); break;
		case 'T':
			fputs(cg_cu_ctype(cg_cu_node(e, e->pk->args[va_arg(ap, int)])->dtype), out);
			break;
		default: /* a directive this printf does not know */
			DTM_ASSERT(!"cg_cu_printf: unknown directive");
			va_end(ap);
			return;
		}
	}
	va_end(ap);
}

/* The kernel's arg j as a typed pointer. */
void cg_cu_put_ptr(const CudaEmit *e, int j, bool in)
{
	fprintf(e->out, "((%s%s *)a.p[%d])", in ? "const " : "",
	        cg_cu_ctype(cg_cu_node(e, e->pk->args[j])->dtype), j);
}

/* The output (the last arg). */
void cg_cu_put_out(const CudaEmit *e)
{
	cg_cu_put_ptr(e, e->pk->nargs - 1, false);
}

int cg_cu_out_arg(const CudaEmit *e)
{
	return e->pk->nargs - 1;
}

void cg_cu_put_f32(FILE *out, double v)
{
	cg_put_float(out, v, true, "DTMC_NAN", "DTMC_INF");
}

void cg_cu_put_f64(FILE *out, double v)
{
	cg_put_float(out, v, false, NULL, NULL);
}

int64_t cg_cu_span(const IrNode *n, int from, int to)
{
	int64_t s = 1;
	for (int d = from; d < to; d++)
		s *= n->shape[d];
	return s;
}

void cg_cu_begin_kernel(CudaEmit *e, int block)
{
	fprintf(e->out, "extern \"C\" __global__ void __launch_bounds__(%d) %s(DtmCudaArgs a)\n{\n",
	        block, e->name);
}

void cg_cu_end_kernel(CudaEmit *e)
{
	fputs("}\n\n", e->out);
}

/* The scratch of a multi-phase kernel: its DtmcSync, and nparts partial
 * sums of type T (none when nparts is 0). */
void cg_cu_put_scratch(CudaEmit *e, const char *t, int64_t nparts)
{
	fprintf(e->out, "__device__ DtmcSync dtmc_sync_%s;\n", e->name);
	if (nparts > 0)
		fprintf(e->out, "__device__ %s dtmc_part_%s[%lld];\n", t, e->name,
		        (long long)nparts);
}

void cg_cu_put_parts_ptr(CudaEmit *e, int64_t nparts)
{
	if (nparts > 0)
		fprintf(e->out, "dtmc_part_%s", e->name);
	else
		fputs("0", e->out);
}

/* An elementwise kernel's first lines: i, and the early return. */
void cg_cu_put_ew_head(CudaEmit *e, int64_t n)
{
	fprintf(e->out, "\tconst dtmc_i64 i = dtmc_tid();\n\tif (i >= %lldLL)\n\t\treturn;\n",
	        (long long)n);
	e->k = (CgCudaKernel){.threads = n, .block = CG_CUDA_BLOCK};
}

/* Writes `target += ...` terms that turn flat index `idx` over the dims
 * ext[0..n) (row-major) into an offset with strides st[]; dims of extent
 * 1 add nothing.  idx must be below the product of ext. */
void cg_cu_put_decompose(FILE *out, const char *idx, const int64_t *ext, const int64_t *st, int n,
                         const char *target, const char *indent)
{
	int first = 0;
	while (first < n && ext[first] == 1)
		first++;
	if (first == n)
		return;
	fprintf(out, "%s{\n%s\tdtmc_i64 q_ = %s;\n", indent, indent, idx);
	for (int d = n - 1; d > first; d--) {
		if (ext[d] == 1)
			continue;
		fprintf(out, "%s\t%s += q_ %% %lldLL * %lldLL;\n%s\tq_ /= %lldLL;\n", indent,
		        target, (long long)ext[d], (long long)st[d], indent, (long long)ext[d]);
	}
	fprintf(out, "%s\t%s += q_ * %lldLL;\n%s}\n", indent, target, (long long)st[first], indent);
}

/* This rank's position in the group of mesh_axes (the lowest-numbered
 * axis major: dtmk_shard_slice's; the axes also set from bit
 * CG_AXES_MINOR up last, as dtmk_group_index), as a local `dtmc_i64
 * name` (0 for no axes). */
void cg_cu_put_group_var(CudaEmit *e, const char *name, uint32_t axes)
{
	uint32_t minor = axes >> CG_AXES_MINOR;
	fprintf(e->out, "\tdtmc_i64 %s = 0;\n", name);
	for (uint32_t last = 0; last < 2; last++)
		for (int k = 0; k < e->m->mesh.naxes; k++)
			if ((axes >> k & 1) && (minor >> k & 1) == last)
				fprintf(e->out, "\t%s = %s * %lldLL + a.coords[%d];\n", name, name,
				        (long long)e->m->mesh.sizes[k], k);
}

void cg_cu_put_group_index(CudaEmit *e, uint32_t axes)
{
	cg_cu_put_group_var(e, "idx", axes);
}

/* ---- the file ---- */

static bool paste_file(FILE *out, const char *path, Diag *d)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		diag_error(d, (SrcLoc){0}, "cannot read '%s': %s", path, strerror(errno));
		return false;
	}
	fprintf(out, "/* ---- %s ---- */\n", strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
	char buf[8192];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		fwrite(buf, 1, n, out);
	fclose(f);
	fputc('\n', out);
	return true;
}

/* The calling convention, then dtmk_cuda.cuh, then the other
 * dtmk_cuda_*.cuh in name order. */
static bool emit_prelude(FILE *out, const IrModule *m, const char *src_dir, Diag *d)
{
	fprintf(out,
	        "/* Generated by dtmc from model '%s': the CUDA kernels of one training\n"
	        " * step, one per plan kernel (runtime/plan.h's DtmCudaKernel).  Do not\n"
	        " * edit. */\n\n",
	        m->name ? m->name : "?");
	fprintf(out,
	        "struct DtmCudaArgs {\n\tvoid *p[%d];\n\tlong long step;\n\tfloat lr;\n"
	        "\tunsigned long long seed;\n\tlong long rank;\n\tlong long coords[%d];\n"
	        "\tfloat loss_scale;\n\tlong long skipped;\n};\n\n",
	        DTM_MAX_ARGS, DTM_MAX_AXES);
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/codegen/cuda", src_dir ? src_dir : ".");
	char *names[64];
	int nn = cg_list_dir(dir, "dtmk_cuda_", ".cuh", names, 64);
	if (nn < 0) {
		diag_error(d, (SrcLoc){0}, "cannot read the CUDA kernel library '%s': %s", dir,
		           strerror(errno));
		return false;
	}
	char path[4200];
	snprintf(path, sizeof path, "%s/dtmk_cuda.cuh", dir);
	bool ok = paste_file(out, path, d);
	for (int i = 0; i < nn; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, names[i] ? names[i] : "");
		if (ok && names[i])
			ok = paste_file(out, path, d);
		free(names[i]);
	}
	return ok;
}

bool cg_emit_cuda(FILE *out, const IrModule *m, const FusePlan *fp, const MemPlan *mp,
                  const char *src_dir, CgCudaKernel *table, int cap, int *nkernels, Diag *d)
{
	int nk = cg_plan_kernels(m, fp, mp, NULL, 0);
	CgPlanKernel *pks = calloc((size_t)(nk ? nk : 1), sizeof *pks);
	if (!pks) {
		diag_error(d, (SrcLoc){0}, "out of memory generating CUDA");
		return false;
	}
	cg_plan_kernels(m, fp, mp, pks, nk);
	bool ok = emit_prelude(out, m, src_dir, d);
	fputs("/* ---- the plan's kernels ---- */\n\n", out);
	/* each distinct kernel once (as the C back end, codegen/emit_c.c):
	 * the text with its own name, comments and node-named temporaries
	 * taken out is the key; a repeat launches the first one's function */
	Arena a;
	arena_init(&a);
	CgKeySet *set = cg_keyset_new(&a, nk);
	char (*names)[sizeof ((CudaEmit *)0)->name] = arena_alloc(&a, sizeof *names * (size_t)(nk ? nk : 1));
	if (!set || !names) {
		diag_error(d, (SrcLoc){0}, "out of memory generating CUDA");
		ok = false;
	}
	for (int k = 0; k < nk && ok; k++) {
		char *buf = NULL;
		size_t len = 0;
		FILE *ms = open_memstream(&buf, &len);
		if (!ms) {
			diag_error(d, (SrcLoc){0}, "out of memory generating CUDA");
			ok = false;
			break;
		}
		CudaEmit e = {.out = ms, .m = m, .fp = fp, .mp = mp, .d = d, .pk = &pks[k]};
		ok = cg_cu_emit_kernel(&e);
		if (fclose(ms) != 0 || !buf) {
			diag_error(d, (SrcLoc){0}, "out of memory generating CUDA");
			ok = false;
		}
		size_t kn = 0;
		char *key = ok ? cg_canon_text(&a, buf, len, e.name, &kn) : NULL;
		/* and its launch: the runtime sets a function's dynamic shared
		 * memory once per table entry (runtime/dev_cuda.c), so entries
		 * that share a function must ask for the same */
		if (key) {
			key = arena_printf(&a, "%s|%d|%d", key, e.k.block, e.k.smem_bytes);
			kn = key ? strlen(key) : 0;
		}
		if (ok && !key) {
			diag_error(d, (SrcLoc){0}, "out of memory generating CUDA");
			ok = false;
		}
		if (ok) {
			bool added;
			int id = cg_keyset_add(set, key, kn, &added);
			if (added) {
				memcpy(names[id], e.name, sizeof e.name);
				fwrite(buf, 1, len, out);
			}
			if (table && k < cap) {
				table[k] = e.k; /* the launch; the function is the first's */
				memcpy(table[k].name, names[id], sizeof e.name);
			}
		}
		free(buf);
	}
	arena_free(&a);
	free(pks);
	if (nkernels)
		*nkernels = nk;
	if (ok && (fflush(out) != 0 || ferror(out))) {
		diag_error(d, (SrcLoc){0}, "error writing the CUDA source");
		ok = false;
	}
	return ok;
}

/* The source as a C string literal, a line per line, '?' after '?'
 * escaped (the generated C is compiled with -std=c11: trigraphs). */
static void put_c_string(FILE *out, const char *s, size_t len)
{
	bool open = false;
	char prev = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!open) {
			fputs("\t\"", out);
			open = true;
		}
		if (c == '\n') {
			fputs("\\n\"\n", out);
			open = false;
		} else if (c == '"' || c == '\\') {
			fprintf(out, "\\%c", c);
		} else if (c == '?' && prev == '?') {
			fputs("\\?", out);
		} else if (c == '\t') {
			fputs("\\t", out);
		} else if (c < 32 || c >= 127) {
			fprintf(out, "\\%03o", c);
		} else {
			fputc(c, out);
		}
		prev = (char)c;
	}
	if (open)
		fputs("\"\n", out);
}

bool cg_emit_cuda_tables(FILE *out, const IrModule *m, const FusePlan *fp, const MemPlan *mp,
                         const char *src_dir, Diag *d)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *ms = open_memstream(&buf, &len);
	if (!ms) {
		diag_error(d, (SrcLoc){0}, "out of memory generating CUDA");
		return false;
	}
	int nk = cg_plan_kernels(m, fp, mp, NULL, 0);
	CgCudaKernel *table = calloc((size_t)(nk ? nk : 1), sizeof *table);
	bool ok = table && cg_emit_cuda(ms, m, fp, mp, src_dir, table, nk, NULL, d);
	if (fclose(ms) != 0 && ok) {
		diag_error(d, (SrcLoc){0}, "out of memory generating CUDA");
		ok = false;
	}
	if (ok) {
		fputs("/* The CUDA kernels (codegen/emit_cuda.c), compiled by NVRTC at run time\n"
		      " * with --device cuda. */\nstatic const char dtm_cuda_source[] =\n",
		      out);
		put_c_string(out, buf, len);
		fputs(";\n\nstatic const DtmCudaKernel dtm_cuda_kernels[] = {\n", out);
		for (int k = 0; k < nk; k++)
			fprintf(out, "\t{ \"%s\", %lld, %d, %d },\n", table[k].name,
			        (long long)table[k].threads, table[k].block, table[k].smem_bytes);
		if (!nk)
			fputs("\t{ NULL, 0, 0, 0 },\n", out);
		fputs("};\n\n", out);
	}
	free(table);
	free(buf);
	return ok;
}

bool cg_write_cuda_source(const IrModule *m, const FusePlan *fp, const MemPlan *mp,
                          const char *path, const char *src_dir, Diag *d)
{
	Arena a;
	arena_init(&a);
	bool ok = true;
	bool std = strcmp(path, "-") == 0;
	char *tmp = std ? NULL : arena_printf(&a, "%s.tmp", path);
	FILE *f = NULL;
	if (ok) {
		f = std ? stdout : fopen(tmp, "w");
		if (!f) {
			diag_error(d, (SrcLoc){0}, "cannot write '%s': %s", tmp, strerror(errno));
			ok = false;
		}
	}
	if (ok)
		ok = cg_emit_cuda(f, m, fp, mp, src_dir, NULL, 0, NULL, d);
	if (f && !std) {
		if (fclose(f) != 0 && ok) {
			diag_error(d, (SrcLoc){0}, "cannot write '%s'", tmp);
			ok = false;
		}
		if (ok && rename(tmp, path) != 0) {
			diag_error(d, (SrcLoc){0}, "cannot rename '%s' to '%s': %s", tmp, path,
			           strerror(errno));
			ok = false;
		}
		if (!ok)
			unlink(tmp);
	}
	arena_free(&a);
	return ok;
}
