/* lower_mesh.c - the mesh and placements of lowering: `mesh (...)` with
 * --mesh, mesh axis names, and the `@ [...]` placement annotations (with
 * choose() sweep points) checked against the mesh and the value's shape.
 *
 * Part of lowering (lower.c calls into it; lower_impl.h is the shared
 * state).  Every problem is a diagnostic; the caller keeps going.
 */
#include "frontend/lower_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- mesh and --mesh ---- */

static const char *axes_list(Lower *L, const Mesh *m)
{
	if (m->naxes == 0)
		return "none";
	char buf[256];
	int k = 0;
	for (int i = 0; i < m->naxes && k < (int)sizeof buf - 40; i++)
		k += snprintf(buf + k, sizeof buf - k, "%s%s", i ? ", " : "", m->names[i]);
	return arena_strdup(L->a, buf);
}

/* --mesh "dp=4,tp=2": every listed axis must be declared; declared axes not
 * listed get size 1 (the text describes the whole mesh). */
void lower_mesh_opt(Lower *L, const char *text)
{
	Mesh *m = &L->m->mesh;
	int64_t sizes[IR_MAX_AXES];
	bool seen[IR_MAX_AXES] = {0};
	for (int i = 0; i < IR_MAX_AXES; i++)
		sizes[i] = 1;
	const char *p = text;
	bool ok = true;
	while (ok) {
		const char *name = p;
		while (*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		       (*p >= '0' && *p <= '9'))
			p++;
		size_t nl = (size_t)(p - name);
		if (nl == 0 || *p != '=') {
			diag_error(L->d, lower_cmdline,
			           "--mesh '%s': expected NAME=SIZE[,NAME=SIZE...]", text);
			return;
		}
		char *nm = arena_strndup(L->a, name, nl);
		p++;
		char *end;
		errno = 0;
		long long sz = strtoll(p, &end, 10);
		if (end == p || errno || (*end && *end != ',') || *p == '-' || *p == '+') {
			diag_error(L->d, lower_cmdline,
			           "--mesh '%s': expected NAME=SIZE[,NAME=SIZE...]", text);
			return;
		}
		p = end;
		int ax = mesh_axis_index(m, nm);
		if (ax < 0) {
			diag_error(L->d, lower_cmdline,
			           "--mesh: the model declares no mesh axis '%s' (axes: %s)",
			           lower_name(L, nm), axes_list(L, m));
			ok = false;
		} else if (seen[ax]) {
			diag_error(L->d, lower_cmdline, "--mesh: axis '%s' is given twice",
			           lower_name(L, nm));
			ok = false;
		} else if (sz < 1) {
			diag_error(L->d, lower_cmdline,
			           "--mesh: axis '%s' must have size >= 1, got %lld", lower_name(L, nm),
			           sz);
			ok = false;
		} else {
			seen[ax] = true;
			sizes[ax] = sz;
		}
		if (*p == 0)
			break;
		p++; /* ',' */
	}
	if (ok)
		for (int i = 0; i < m->naxes; i++)
			m->sizes[i] = sizes[i];
}

void lower_mesh(Lower *L, const AstNode *mesh)
{
	Mesh *m = &L->m->mesh;
	SrcLoc firstloc[IR_MAX_AXES];
	m->naxes = 0;
	SrcLoc where = mesh ? mesh->loc : lower_cmdline;
	if (mesh) {
		int n = mesh->nnames < mesh->args.n ? mesh->nnames : mesh->args.n;
		for (int i = 0; i < n; i++) {
			const AstName *an = &mesh->names[i];
			if (!an->name)
				continue;
			int prev = mesh_axis_index(m, an->name);
			if (prev >= 0) {
				diag_error(L->d, an->loc, "mesh axis '%s' is declared twice",
				           lower_name(L, an->name));
				diag_note(L->d, firstloc[prev], "first declared here");
				continue;
			}
			if (an->name[0] >= '0' && an->name[0] <= '9') {
				/* a word like 1f1b lexes as a name (schedule 1f1b),
				 * but an axis name is written bare in placements and in
				 * the IR text, which reads names that start with a
				 * letter or '_' */
				diag_error(L->d, an->loc,
				           "mesh axis '%s' starts with a digit: an axis name "
				           "starts with a letter or '_' (e.g. dp, tp, pp)",
				           lower_name(L, an->name));
				continue;
			}
			if (m->naxes == IR_MAX_AXES) {
				diag_error(L->d, an->loc, "too many mesh axes (at most %d)",
				           IR_MAX_AXES);
				break;
			}
			int64_t sz = 1;
			const AstNode *e = mesh->args.items[i];
			const char *what = arena_printf(L->a, "the size of mesh axis '%s'",
			                                lower_name(L, an->name));
			if (e && lower_const_int(L, &L->globals, e, what, &sz) && sz < 1) {
				diag_error(L->d, e->loc, "%s must be >= 1, got %lld", what,
				           (long long)sz);
				sz = 1;
			}
			firstloc[m->naxes] = an->loc;
			m->names[m->naxes] = an->name;
			m->sizes[m->naxes] = sz < 1 ? 1 : sz;
			m->naxes++;
		}
	}
	if (L->opt && L->opt->mesh) {
		lower_mesh_opt(L, L->opt->mesh);
		where = lower_cmdline;
	}
	if (L->opt && L->opt->mesh_ones)
		for (int i = 0; i < m->naxes; i++)
			m->sizes[i] = 1;
	/* the pipeline runs along the axis named pp: the one place the name
	 * decides it (IrModule.pp_axis) */
	L->m->pp_axis = mesh_axis_index(m, "pp");
	/* checked product: each size is tested first, so it cannot overflow */
	int64_t total = 1;
	bool big = false;
	for (int i = 0; i < m->naxes; i++) {
		if (m->sizes[i] > ((int64_t)1 << 20))
			big = true;
		else
			total *= m->sizes[i];
		if (total > ((int64_t)1 << 20))
			big = true;
	}
	if (big) {
		diag_error(L->d, where, "the mesh has more than %d ranks", 1 << 20);
		for (int i = 0; i < m->naxes; i++)
			m->sizes[i] = 1;
	}
	/* axis names are integer constants (their sizes), as in
	 * `stage i * pp / layers` */
	for (int i = 0; i < m->naxes; i++)
		lower_define_global(L, m->names[i], lower_int(m->sizes[i]), firstloc[i]);
}

/* ---- placements ---- */

bool lower_axes_mask(Lower *L, const AstName *names, int n, uint32_t *mask)
{
	bool ok = true;
	*mask = 0;
	for (int i = 0; i < n; i++) {
		if (!names[i].name) {
			ok = false;
			continue;
		}
		int ax = mesh_axis_index(&L->m->mesh, names[i].name);
		if (ax < 0) {
			diag_error(L->d, names[i].loc, "unknown mesh axis '%s'",
			           lower_name(L, names[i].name));
			const char *s =
			        lower_suggest(names[i].name, L->m->mesh.names, L->m->mesh.naxes);
			if (s)
				diag_note(L->d, names[i].loc, "did you mean '%s'?",
				          lower_name(L, s));
			ok = false;
		} else if (*mask & (1u << ax)) {
			diag_error(L->d, names[i].loc, "mesh axis '%s' appears more than once",
			           lower_name(L, names[i].name));
			ok = false;
		} else if (ax == L->m->pp_axis) {
			/* the pipeline's ranks run different programs: a value
			 * split over pp would be a stage's and every stage's */
			diag_error(L->d, names[i].loc,
			           "mesh axis 'pp' is the pipeline axis: it places blocks on "
			           "stages, it cannot split or shard a value");
			diag_note(L->d, names[i].loc,
			          "use another axis here (dp, tp, ...); blocks go on stages with "
			          "`for ... stage EXPR { ... }`");
			ok = false;
		} else {
			*mask |= 1u << ax;
		}
	}
	return ok;
}

bool lower_placement(Lower *L, const AstPlacement *ap, int rank, const int64_t *shape,
                     const char *what, bool allow_partial, Placement *out)
{
	const Mesh *mesh = &L->m->mesh;
	memset(out, 0, sizeof *out);
	if (ap->too_many) {
		diag_error(L->d, ap->loc,
		           "placement has too many dims or axes (at most %d dims, %d axes)",
		           IR_MAX_RANK, IR_MAX_AXES);
		return false;
	}
	bool ok = true;
	uint32_t used = 0;
	int nd = ap->ndims < AST_MAX_PDIMS ? ap->ndims : AST_MAX_PDIMS;
	for (int d = 0; d < nd; d++) {
		int na = ap->naxes[d] < 8 ? ap->naxes[d] : 8;
		for (int j = 0; j < na; j++) {
			uint32_t bit;
			if (!lower_axes_mask(L, &ap->axes[d][j], 1, &bit)) {
				ok = false;
			} else if (used & bit) {
				diag_error(L->d, ap->axes[d][j].loc,
				           "mesh axis '%s' appears more than once in the placement",
				           ap->axes[d][j].name);
				ok = false;
			} else {
				used |= bit;
				if (d < IR_MAX_RANK)
					out->axes[d][out->naxes[d]++] =
					        (uint8_t)mesh_axis_index(mesh, ap->axes[d][j].name);
			}
		}
	}
	int np = ap->npartial < 8 ? ap->npartial : 8;
	if (np > 0 && !allow_partial) {
		diag_error(L->d, ap->partial[0].loc,
		           "%s cannot be partial (only intermediate values can)", what);
		ok = false;
	}
	for (int j = 0; j < np && allow_partial; j++) {
		uint32_t bit;
		if (!lower_axes_mask(L, &ap->partial[j], 1, &bit)) {
			ok = false;
		} else if (used & bit) {
			diag_error(L->d, ap->partial[j].loc,
			           "mesh axis '%s' appears more than once in the placement",
			           lower_name(L, ap->partial[j].name));
			ok = false;
		} else {
			used |= bit;
			out->partial |= bit;
		}
	}
	out->partial_op = IR_RED_SUM;
	if (!ok)
		return false;
	if (nd != rank) {
		diag_error(L->d, ap->loc, "placement has %d dims but %s has rank %d", nd, what,
		           rank);
		return false;
	}
	out->known = true;
	out->ndims = (uint8_t)nd;
	for (int d = 0; d < nd; d++) {
		int64_t parts = 1;
		for (int j = 0; j < out->naxes[d]; j++)
			parts *= mesh->sizes[out->axes[d][j]];
		/* torch.chunk shards only when the program asks for them: the
		 * default would let a typo in a size pass silently */
		if (parts <= 1 || shape[d] % parts == 0 ||
		    L->m->train.uneven_shards)
			continue;
		if (out->naxes[d] == 1) {
			diag_error(L->d, ap->axes[d][0].loc,
			           "dim %d of %s (size %lld) is not divisible by mesh axis '%s' "
			           "(size %lld)",
			           d, what, (long long)shape[d], mesh->names[out->axes[d][0]],
			           (long long)parts);
		} else {
			char buf[128];
			int k = 0;
			for (int j = 0; j < out->naxes[d] && k < 100; j++)
				k += snprintf(buf + k, sizeof buf - k, "%s%s", j ? ", " : "",
				              mesh->names[out->axes[d][j]]);
			diag_error(L->d, ap->axes[d][0].loc,
			           "dim %d of %s (size %lld) is not divisible by mesh axes (%s) "
			           "(size %lld)",
			           d, what, (long long)shape[d], buf, (long long)parts);
		}
		if (L->uneven_loc.file)
			diag_note(L->d, L->uneven_loc, "uneven shards are refused here");
		else
			diag_note(L->d, ap->axes[d][0].loc,
			          "'uneven_shards true' in the train section "
			          "allows uneven (torch.chunk) shards");
		ok = false;
	}
	if (!ok)
		out->known = false;
	return ok;
}

bool lower_annotate(Lower *L, const AstAnnot *an, IrNode *n, const char *what, bool allow_partial)
{
	if (!an || an->nopts < 1 || !an->opts)
		return false;
	Placement *opts = arena_alloc(L->a, sizeof(Placement) * (size_t)an->nopts);
	if (!opts)
		return false;
	bool ok = true;
	for (int i = 0; i < an->nopts; i++) {
		if (!an->opts[i] || !lower_placement(L, an->opts[i], n->rank, n->shape, what,
		                                     allow_partial, &opts[i]))
			ok = false;
	}
	if (!ok)
		return false;
	if (!ir_place_set(L->m, n, &opts[0]))
		return false;
	ir_set_place_from(L->m, n, -1);
	ir_set_place_loc(L->m, n, an->loc); /* the origin that propagate and print report */
	if (an->is_choose) {
		int c = ir_choose_add(L->m, n->id, opts, an->nopts, an->loc);
		if (c >= 0)
			ir_set_choose(L->m, n, c);
	}
	return true;
}
