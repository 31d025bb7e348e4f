/* emu.cpp - the fiber scheduler behind emu.h: runs a generated CUDA kernel
 * on the host, block after block, each block's threads as ucontext fibers
 * switched at barriers (see emu.h).
 *
 *   extern "C" int emu_launch(const char *name, const void *args,
 *                             long long threads, int block, int smem);
 *
 * finds NAME in the kernels' table (emu_kernels, generated beside the
 * kernels) and runs ceil(threads / block) blocks of `block` threads; args
 * points at a DtmCudaArgs.  Returns 0, or -1 after printing why (unknown
 * kernel, a barrier no thread can pass, a phase wait that never ends).
 */
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include "emu.h"

/* runtime/plan.h's layout, as the generated source defines it */
struct DtmCudaArgs {
	void *p[8];
	long long step;
	float lr;
	unsigned long long seed;
	long long rank;
	long long coords[8];
	float loss_scale;
	long long skipped;
};

extern "C" const EmuKernel emu_kernels[];

float emu_dyn_smem[49152 / 4 + 16];

enum { F_RUN, F_WAIT_BLOCK, F_WAIT_WARP, F_DONE };

struct Fiber {
	ucontext_t ctx;
	char *stack;
	int state;
};

#define EMU_STACK (64 * 1024)
#define EMU_MAX_BLOCK 1024

static Fiber fibers[EMU_MAX_BLOCK];
static ucontext_t sched;
static int cur, nthr;
static unsigned cur_block, grid;
static void (*cur_fn)(DtmCudaArgs);
static DtmCudaArgs cur_args;
static int blk_arrived, warp_arrived[EMU_MAX_BLOCK / 32];
static uint64_t warp_slot[EMU_MAX_BLOCK / 32][32];
static long long spins;
static bool failed;

emu_dim3 emu_thread_idx()
{
	return emu_dim3{(unsigned)cur, 0, 0};
}

emu_dim3 emu_block_idx()
{
	return emu_dim3{cur_block, 0, 0};
}

emu_dim3 emu_block_dim()
{
	return emu_dim3{(unsigned)nthr, 1, 1};
}

emu_dim3 emu_grid_dim()
{
	return emu_dim3{grid, 1, 1};
}

int emu_lane()
{
	return cur % 32;
}

static void yield_to_sched()
{
	swapcontext(&fibers[cur].ctx, &sched);
}

void __syncthreads()
{
	fibers[cur].state = F_WAIT_BLOCK;
	blk_arrived++;
	yield_to_sched();
}

static void warp_barrier()
{
	fibers[cur].state = F_WAIT_WARP;
	warp_arrived[cur / 32]++;
	yield_to_sched();
}

void emu_warp_exchange(uint64_t v, uint64_t *all)
{
	int w = cur / 32;
	warp_slot[w][cur % 32] = v;
	warp_barrier();
	memcpy(all, warp_slot[w], sizeof warp_slot[w]);
	warp_barrier(); /* nobody overwrites a slot before all have read */
}

/* A spinning wait (dtmc_wait_phase): blocks run in ticket order, so a
 * wait that does not end at once never will. */
void __nanosleep(unsigned ns)
{
	(void)ns;
	if (++spins > 1000000) {
		fprintf(stderr, "emu: a phase wait never ended (block %u, thread %d)\n", cur_block,
		        cur);
		abort();
	}
	yield_to_sched();
}

static void fiber_main()
{
	cur_fn(cur_args);
	fibers[cur].state = F_DONE;
}

/* Releases the barriers every live thread has reached. */
static void release()
{
	int live = 0;
	for (int t = 0; t < nthr; t++)
		live += fibers[t].state != F_DONE;
	if (live && blk_arrived == live) {
		for (int t = 0; t < nthr; t++)
			if (fibers[t].state == F_WAIT_BLOCK)
				fibers[t].state = F_RUN;
		blk_arrived = 0;
	}
	for (int w = 0; w * 32 < nthr; w++) {
		int wl = 0;
		for (int t = w * 32; t < w * 32 + 32 && t < nthr; t++)
			wl += fibers[t].state != F_DONE;
		if (wl && warp_arrived[w] == wl) {
			for (int t = w * 32; t < w * 32 + 32 && t < nthr; t++)
				if (fibers[t].state == F_WAIT_WARP)
					fibers[t].state = F_RUN;
			warp_arrived[w] = 0;
		}
	}
}

static int run_block()
{
	for (int t = 0; t < nthr; t++) {
		if (!fibers[t].stack && !(fibers[t].stack = (char *)malloc(EMU_STACK))) {
			fputs("emu: out of memory\n", stderr);
			return -1;
		}
		getcontext(&fibers[t].ctx);
		fibers[t].ctx.uc_stack.ss_sp = fibers[t].stack;
		fibers[t].ctx.uc_stack.ss_size = EMU_STACK;
		fibers[t].ctx.uc_link = &sched;
		makecontext(&fibers[t].ctx, fiber_main, 0);
		fibers[t].state = F_RUN;
	}
	blk_arrived = 0;
	memset(warp_arrived, 0, sizeof warp_arrived);
	for (;;) {
		bool ran = false, alive = false;
		for (int t = 0; t < nthr; t++) {
			if (fibers[t].state == F_DONE)
				continue;
			alive = true;
			if (fibers[t].state != F_RUN)
				continue;
			cur = t;
			swapcontext(&sched, &fibers[t].ctx);
			ran = true;
			release();
		}
		if (!alive)
			return 0;
		if (!ran) {
			release();
			bool any = false;
			for (int t = 0; t < nthr; t++)
				any |= fibers[t].state == F_RUN;
			if (!any) {
				fprintf(stderr,
				        "emu: block %u: threads wait at barriers no thread "
				        "can pass (divergent __syncthreads or warp operation)\n",
				        cur_block);
				return -1;
			}
		}
	}
}

extern "C" int emu_launch(const char *name, const void *args, long long threads, int block,
                          int smem)
{
	const EmuKernel *k = emu_kernels;
	while (k->name && strcmp(k->name, name) != 0)
		k++;
	if (!k->name) {
		fprintf(stderr, "emu: no kernel '%s'\n", name);
		return -1;
	}
	if (block <= 0 || block > EMU_MAX_BLOCK || block % 32 || smem < 0 ||
	    smem > (int)sizeof emu_dyn_smem - 64) {
		fprintf(stderr, "emu: %s: bad launch (block %d, shared memory %d)\n", name, block,
		        smem);
		return -1;
	}
	if (threads <= 0)
		return 0;
	cur_fn = k->fn;
	memcpy(&cur_args, args, sizeof cur_args);
	nthr = block;
	grid = (unsigned)((threads + block - 1) / block);
	spins = 0;
	for (cur_block = 0; cur_block < grid; cur_block++) {
		/* garbage in shared memory, as on a GPU */
		for (size_t i = 0; i < sizeof emu_dyn_smem / 4; i++)
			emu_dyn_smem[i] = NAN;
		if (run_block() != 0)
			return -1;
	}
	return failed ? -1 : 0;
}
