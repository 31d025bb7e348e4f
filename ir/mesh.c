/* mesh.c - ranks and mesh coordinates.
 *
 * Coordinates are row-major over the declared axes: the first axis is the
 * major (slowest-varying) one, so for mesh (pp = 2, fsdp = 4, tp = 2)
 * rank = pp*8 + fsdp*2 + tp.  Groups are derived from coordinates, never
 * stored as rank lists, so a 4096-rank mesh costs what an 8-rank one does.
 */
#include "ir/ir.h"

#include <string.h>

int64_t mesh_size(const Mesh *m)
{
	int64_t n = 1;
	for (int i = 0; i < m->naxes && i < IR_MAX_AXES; i++)
		n *= m->sizes[i];
	return n;
}

int mesh_axis_index(const Mesh *m, const char *name)
{
	for (int i = 0; i < m->naxes && i < IR_MAX_AXES; i++)
		if (m->names[i] && strcmp(m->names[i], name) == 0)
			return i;
	return -1;
}

void mesh_coords(const Mesh *m, int64_t rank, int64_t *coords)
{
	for (int i = m->naxes - 1; i >= 0; i--) {
		int64_t s = m->sizes[i] > 0 ? m->sizes[i] : 1;
		coords[i] = rank % s;
		rank /= s;
	}
}

int64_t mesh_rank(const Mesh *m, const int64_t *coords)
{
	int64_t r = 0;
	for (int i = 0; i < m->naxes; i++)
		r = r * m->sizes[i] + coords[i];
	return r;
}

int64_t mesh_axes_size(const Mesh *m, uint32_t axes_mask)
{
	int64_t n = 1;
	for (int i = 0; i < m->naxes && i < IR_MAX_AXES; i++)
		if (axes_mask & (1u << i))
			n *= m->sizes[i];
	return n;
}

int64_t mesh_group(const Mesh *m, int64_t rank, uint32_t axes_mask,
                   int64_t *out, int64_t cap, int64_t *index)
{
	int64_t base[IR_MAX_AXES], c[IR_MAX_AXES];
	int sel[IR_MAX_AXES], nsel = 0;
	mesh_coords(m, rank, base);
	for (int i = 0; i < m->naxes && i < IR_MAX_AXES; i++)
		if (axes_mask & (1u << i))
			sel[nsel++] = i;
	int64_t size = mesh_axes_size(m, axes_mask);
	/* rank's position: its coordinates on the selected axes, row-major */
	int64_t pos = 0;
	for (int k = 0; k < nsel; k++)
		pos = pos * m->sizes[sel[k]] + base[sel[k]];
	if (index)
		*index = pos;
	memcpy(c, base, sizeof c);
	for (int64_t g = 0; g < size && g < cap; g++) {
		/* decode member g into the selected coordinates, last axis minor */
		int64_t rest = g;
		for (int k = nsel - 1; k >= 0; k--) {
			int64_t s = m->sizes[sel[k]];
			c[sel[k]] = rest % s;
			rest /= s;
		}
		out[g] = mesh_rank(m, c);
	}
	return size;
}
