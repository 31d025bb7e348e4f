/* mlir_capi.c - libdtm_mlir.so: MLIR's parser, verifier and passes through
 * its C API, for dtmc (tools/mlir.h).  Built only where CMake finds MLIR
 * 19; links the static C API libraries and libMLIR. */
#include "tools/mlir_plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mlir-c/Diagnostics.h>
#include <mlir-c/IR.h>
#include <mlir-c/Pass.h>
#include <mlir-c/RegisterEverything.h>

/* A growing text: printed IR or diagnostics. */
typedef struct Buf {
	char *p;
	size_t n, cap;
} Buf;

static void buf_add(Buf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t c = b->cap ? 2 * b->cap : 4096;
		while (c < b->n + n + 1)
			c *= 2;
		char *q = realloc(b->p, c);
		if (!q)
			return;
		b->p = q;
		b->cap = c;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static void to_buf(MlirStringRef s, void *u)
{
	buf_add(u, s.data, s.length);
}

/* Every diagnostic, "LOC: error: message", one per line. */
static MlirLogicalResult on_diag(MlirDiagnostic d, void *u)
{
	Buf *b = u;
	mlirLocationPrint(mlirDiagnosticGetLocation(d), to_buf, b);
	static const char *const sev[] = {"error", "warning", "note", "remark"};
	MlirDiagnosticSeverity s = mlirDiagnosticGetSeverity(d);
	buf_add(b, ": ", 2);
	const char *w = (unsigned)s < 4 ? sev[s] : "error";
	buf_add(b, w, strlen(w));
	buf_add(b, ": ", 2);
	mlirDiagnosticPrint(d, to_buf, b);
	buf_add(b, "\n", 1);
	return mlirLogicalResultSuccess();
}

static MlirContext context_with(Buf *diag, MlirDiagnosticHandler handler)
{
	MlirDialectRegistry reg = mlirDialectRegistryCreate();
	mlirRegisterAllDialects(reg);
	MlirContext ctx = mlirContextCreate();
	mlirContextAppendDialectRegistry(ctx, reg);
	mlirDialectRegistryDestroy(reg);
	mlirContextLoadAllAvailableDialects(ctx);
	mlirContextAttachDiagnosticHandler(ctx, handler, diag, NULL);
	return ctx;
}

static MlirContext context(Buf *diag)
{
	return context_with(diag, on_diag);
}

static int finish(MlirContext ctx, MlirModule mod, int rc, Buf *out, Buf *diag, char **o,
                  char **e)
{
	if (!rc && !mlirModuleIsNull(mod))
		mlirOperationPrint(mlirModuleGetOperation(mod), to_buf, out);
	if (!mlirModuleIsNull(mod))
		mlirModuleDestroy(mod);
	mlirContextDestroy(ctx);
	if (rc && !diag->n)
		buf_add(diag, "MLIR rejected the module\n", 25);
	*o = rc ? NULL : out->p;
	*e = rc ? diag->p : NULL;
	if (rc)
		free(out->p);
	else
		free(diag->p);
	return rc;
}

/* The textual pass pipeline on mod (parsed and verified), the pass
 * manager's verifier on or off. */
static int run_pipeline(MlirContext ctx, MlirModule mod, const char *pipeline, bool verify,
                        Buf *diag)
{
	static int registered;
	if (!registered++)
		mlirRegisterAllPasses();
	MlirPassManager pm = mlirPassManagerCreate(ctx);
	mlirPassManagerEnableVerifier(pm, verify);
	MlirOpPassManager opm = mlirPassManagerGetAsOpPassManager(pm);
	int rc = !mlirLogicalResultIsSuccess(
	        mlirParsePassPipeline(opm, mlirStringRefCreateFromCString(pipeline), to_buf, diag));
	if (!rc)
		rc = !mlirLogicalResultIsSuccess(mlirPassManagerRunOnOp(pm, mlirModuleGetOperation(mod)));
	mlirPassManagerDestroy(pm);
	return rc;
}

/* src parsed and verified (rc 0: so far so good), in ctx. */
static MlirModule parse(MlirContext ctx, const char *src, int *rc)
{
	MlirModule mod = mlirModuleCreateParse(ctx, mlirStringRefCreateFromCString(src));
	*rc = mlirModuleIsNull(mod) || !mlirOperationVerify(mlirModuleGetOperation(mod));
	return mod;
}

static int run(const char *src, const char *pipeline, char **o, char **e)
{
	Buf out = {0}, diag = {0};
	MlirContext ctx = context(&diag);
	int rc;
	MlirModule mod = parse(ctx, src, &rc);
	if (!rc && pipeline) {
		rc = run_pipeline(ctx, mod, pipeline, true, &diag);
		if (!rc)
			rc = !mlirOperationVerify(mlirModuleGetOperation(mod));
	}
	return finish(ctx, mod, rc, &out, &diag, o, e);
}

static int check(const char *src, char **o, char **e)
{
	return run(src, NULL, o, e);
}

/* MLIR's diagnostics as "LINE:COL: message" lines (the import's form). */
static MlirLogicalResult on_diag_lc(MlirDiagnostic d, void *u)
{
	Buf *b = u, loc = {0};
	mlirLocationPrint(mlirDiagnosticGetLocation(d), to_buf, &loc);
	/* loc("NAME":LINE:COL) */
	const char *c = loc.p ? strrchr(loc.p, ':') : NULL, *l = c;
	while (l && l > loc.p && l[-1] >= '0' && l[-1] <= '9')
		l--;
	char head[48];
	snprintf(head, sizeof head, "%d:%d: ", l && l > loc.p && l[-1] == ':' ? atoi(l) : 0,
	         c ? atoi(c + 1) : 0);
	free(loc.p);
	buf_add(b, head, strlen(head));
	if (mlirDiagnosticGetSeverity(d) != MlirDiagnosticError)
		buf_add(b, "(note) ", 7);
	mlirDiagnosticPrint(d, to_buf, b);
	buf_add(b, "\n", 1);
	return mlirLogicalResultSuccess();
}

static int import(const char *src, const char *path, char **o, char **e)
{
	Buf diag = {0};
	MlirContext ctx = context_with(&diag, on_diag_lc);
	int rc;
	MlirModule mod = parse(ctx, src, &rc);
	*o = NULL;
	if (!rc && !mlir_import_module(mod, path, o, e))
		rc = 1;
	else if (rc)
		*e = diag.p ? diag.p : strdup("0:0: MLIR rejected the module\n");
	if (!rc || *e != diag.p)
		free(diag.p);
	if (!mlirModuleIsNull(mod))
		mlirModuleDestroy(mod);
	mlirContextDestroy(ctx);
	return rc;
}

/* As run, but the passes run without the verifier and the result prints in
 * the generic form whether or not it verifies (MLIR 19's mesh-spmdization
 * leaves an ill-typed scf.if behind for a reduction split over one mesh
 * axis whose result is split over another: its collectives are still what
 * the pass decided).  The final verifier's diagnostics, if any, go to
 * *bad (rc 0). */
static int run_unverified(const char *src, const char *pipeline, char **o, char **bad,
                          char **e)
{
	Buf out = {0}, diag = {0};
	MlirContext ctx = context(&diag);
	int rc;
	MlirModule mod = parse(ctx, src, &rc);
	if (!rc)
		rc = run_pipeline(ctx, mod, pipeline, false, &diag);
	*bad = NULL;
	if (!rc) {
		size_t before = diag.n; /* the final verifier's diagnostics follow */
		if (!mlirOperationVerify(mlirModuleGetOperation(mod)))
			*bad = strdup(diag.n > before ? diag.p + before : "MLIR rejects the result\n");
		MlirOpPrintingFlags fl = mlirOpPrintingFlagsCreate();
		mlirOpPrintingFlagsPrintGenericOpForm(fl);
		mlirOperationPrintWithFlags(mlirModuleGetOperation(mod), fl, to_buf, &out);
		mlirOpPrintingFlagsDestroy(fl);
	}
	if (!mlirModuleIsNull(mod))
		mlirModuleDestroy(mod);
	mlirContextDestroy(ctx);
	if (rc && !diag.n)
		buf_add(&diag, "MLIR rejected the module\n", 25);
	*o = rc ? NULL : out.p;
	*e = rc ? diag.p : NULL;
	if (rc)
		free(out.p);
	else
		free(diag.p);
	return rc;
}

static const DtmMlirApi api = {DTM_MLIR_API_VERSION, check, run, import, run_unverified};

__attribute__((visibility("default"))) const DtmMlirApi *dtm_mlir_api(void)
{
	return &api;
}
