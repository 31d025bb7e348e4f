/* dtmc.c - the dtmc command line: argument parsing and dispatch only (the
 * compile driver, lower -> passes -> analyses -> Plan, is driver/driver.h).
 *
 *   dtmc check FILE [-D name=value]... [--mesh axis=size,...] [--train key=value]...
 *   dtmc print [--after=PASS] [-D name=value]... [--mesh ...] [--train ...]... FILE|-
 *   dtmc opt --pass=PASS [-v] IN.ir|-
 *   dtmc build FILE -o NAME [-D name=value]... [--mesh ...] [--train ...]... [-v] [--keep-c]
 *              [--cuda]
 *   dtmc cuda-src FILE -o FILE.cu [-D name=value]... [--mesh ...] [--train ...]...
 *   dtmc inspect FILE [-D ...]... [--mesh ...] [--train ...]... [--hw NAME|FILE] [--nodes K]
 *              [--rank R] [--json] [--trace FILE] [--dot FILE [--dot-scope SCOPE]]
 *              (inspect.c, inspect_dot.c)
 *   dtmc export-mlir FILE [-o OUT.mlir] [-D ...]... [--mesh ...] [--train ...]...
 *   dtmc mlir-spmd FILE [--json] [-o CUT.mlir] [-D ...]... [--mesh ...] [--train ...]...
 *              (mlir_export.c, mlir_spmd.c, through the plugin mlir_capi.c)
 *   dtmc sweep FILE --devices N [--hw NAME|FILE] [--mem-limit BYTES] ... (sweep.c)
 *   dtmc help [COMMAND] | dtmc --help | dtmc --version
 *
 * FILE is a .dtm model, or the IR's text form when it ends in .ir or is `-`
 * (standard input).  User errors are diagnostics; the exit status is 0 on
 * success and 1 on any user error.  Nothing here calls exit(): every path
 * returns to main.  Reports live in report.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/emit_cuda.h"
#include "codegen/link.h"
#include "driver/driver.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "runtime/fsio.h"
#include "tools/calibrate.h"
#include "tools/ckpt_tool.h"
#include "tools/inspect.h"
#include "tools/mlir.h"
#include "tools/report.h"
#include "tools/sweep.h"
#include "tools/tokenize.h"

#define DTMC_VERSION "0.1.0"

typedef struct Args {
	const char *file;
	const char *after; /* --after=PASS, or NULL */
	const char *pass;  /* opt: --pass=PASS */
	bool verbose;
	bool time_passes;  /* --time-passes: time per pass on stderr */
	const char *output; /* build: -o NAME */
	bool keep_c;        /* build: --keep-c */
	bool cuda;          /* build: --cuda */
	LowerOptions lower;
	/* inspect */
	const char *hw, *trace, *dot, *dot_scope;
	int nodes;
	int64_t rank;
	bool json;
} Args;

typedef struct Command {
	const char *name;
	const char *summary;
	const char *help;
	int (*run)(const Args *args);
	bool has_after;
	bool has_output; /* takes -o NAME and --keep-c */
	/* A command that parses its own options (argv[0] is its name); run,
	 * has_after and has_output are unused then. */
	int (*main)(int argc, char **argv);
} Command;

static int cmd_check(const Args *args);
static int cmd_print(const Args *args);
static int cmd_build(const Args *args);
static int cmd_cuda_src(const Args *args);
static int cmd_inspect(const Args *args);
static int cmd_opt(const Args *args);
static int cmd_export_mlir(const Args *args);
static int cmd_import_mlir(const Args *args);
static int cmd_mlir_spmd(const Args *args);

/* the byte-level tokenizer (tools/tokenize.c) writes llm.c token files
 * the training binary reads; dtmc only dispatches to it */
static int cmd_tokenize(int argc, char **argv)
{
	return tokenize_main(argc, argv) == 0 ? 0 : 1;
}

static const Command commands[] = {
	{"check", "parse, lower and verify a model; summarise its mesh and parameters",
	 "usage: dtmc check FILE [-D name=value]... [--mesh axis=size,...] [--train key=value]...\n"
	 "                  [--time-passes]\n"
	 "\n"
	 "Parses, lowers and verifies FILE (with pp > 1 also its pipeline stages, as\n"
	 "build decides them), then prints the model name, the mesh with\n"
	 "its axis sizes and rank count, the parameter count, the inputs and train\n"
	 "settings, and a table of parameters: name, dtype, global shape, placement\n"
	 "and elements per rank (min..max when the shards are uneven), with per-rank\n"
	 "totals.  Errors are reported as file:line:col with the source line.\n"
	 "\n"
	 "options:\n"
	 "  -D name=value          override a `let` constant (repeatable)\n"
	 "  --mesh axis=size,...   replace the declared mesh sizes; a declared axis\n"
	 "                         not listed gets size 1\n"
	 "  --train key=value      set a train setting, replacing the file's (repeatable;\n"
	 "                         the value as written after the key in the train\n"
	 "                         section): --train zero=3, --train \"zero=3 over dp\",\n"
	 "                         --train reshard_after_forward=false, --train steps=50\n"
	 "  -v, --verbose          say what runs\n"
	 "  --time-passes          print the time of loading, each pass and the plan\n"
	 "                         (wall and CPU) on standard error\n"
	 "\n"
	 "FILE may also be IR text (a name ending in .ir, or - for standard input).\n",
	 cmd_check, false, false, NULL},
	{"print", "print the IR after a pass of the pipeline",
	 "usage: dtmc print [--after=PASS] [-D name=value]... [--mesh axis=size,...]\n"
	 "                  [--train key=value]... [--time-passes] FILE|-\n"
	 "\n"
	 "Lowers FILE, runs the pass pipeline up to and including PASS (default: all\n"
	 "passes) with the verifier after each, and prints the IR's text form to\n"
	 "standard output.  --after=lower prints the IR as lowering produced it.\n"
	 "\n"
	 "FILE ending in .ir, or -, is read as IR text instead of a .dtm model: it is\n"
	 "parsed, verified and printed unchanged unless --after names a pass, so\n"
	 "  dtmc print --after=lower m.dtm | dtmc print -\n"
	 "prints the same text twice.  IR printed after a pass says so (`after PASS`)\n"
	 "and goes on from there: --after names that pass or a later one.\n"
	 "\n"
	 "options:\n"
	 "  --after=PASS           stop after PASS (see the list below)\n"
	 "  -D name=value          override a `let` constant (repeatable)\n"
	 "  --mesh axis=size,...   replace the declared mesh sizes\n"
	 "  --train key=value      set a train setting, replacing the file's (repeatable;\n"
	 "                         the value as written after the key in the train\n"
	 "                         section): --train zero=3, --train \"zero=3 over dp\",\n"
	 "                         --train reshard_after_forward=false, --train steps=50\n"
	 "  -v, --verbose          name each pass as it runs\n"
	 "  --time-passes          print the time of loading, each pass and the plan\n"
	 "                         (wall and CPU) on standard error\n"
	 ,
	 cmd_print, true, false, NULL},
	{"opt", "run one pass on IR text and print the IR it leaves",
	 "usage: dtmc opt --pass=PASS [-v] [--time-passes] IN.ir|-\n"
	 "\n"
	 "Reads IR text (a file ending in .ir, or - for standard input), runs the one\n"
	 "pass PASS on it with the verifier after it, and prints the IR's text form to\n"
	 "standard output, as `dtmc print` does: IR in, one pass, IR out, the way the\n"
	 "tests under tests/passes/ check each pass.  The input must be the IR after\n"
	 "the pass before PASS (its `after` line names that pass; for the first pass,\n"
	 "`stages`, IR as lowered, without an `after` line), which\n"
	 "  dtmc print --after=PREV m.dtm > m.ir\n"
	 "makes; anything else is an error at the `after` line naming the pass it\n"
	 "needs.  For the analyses (fuse, memplan), which leave the IR as it is, their\n"
	 "result follows the IR as comment lines (`# fuse: ...`, `# memplan: ...`):\n"
	 "fused groups and folded transposes; bytes per arena (and pipeline stage)\n"
	 "and each value's arena, offset, bytes and live range or the value it aliases.\n"
	 "\n"
	 "options:\n"
	 "  --pass=PASS            the pass to run (see the list below)\n"
	 "  -v, --verbose          name the pass as it runs; memplan's arenas\n"
	 "  --time-passes          print the time of parsing, the pass and the verifier\n"
	 "                         on standard error\n",
	 cmd_opt, false, false, NULL},
	{"build", "compile a model into a training binary for its mesh",
	 "usage: dtmc build FILE -o NAME [-D name=value]... [--mesh axis=size,...]\n"
	 "                  [--train key=value]... [-v] [--keep-c] [--cuda] [--time-passes]\n"
	 "\n"
	 "Runs the pass pipeline, plans memory, writes C for the CPU and compiles it\n"
	 "with the system C compiler ($CC, default cc) into the executable NAME, which\n"
	 "trains the model (run ./NAME --help).  NAME is written only when everything\n"
	 "succeeded.  A multi-rank mesh builds one per-rank program: ./NAME runs\n"
	 "the ranks as threads, `mpirun -np RANKS ./NAME --backend mpi` as processes\n"
	 "(when dtmc was built with MPI).  --mesh dp=1 builds for one device (every\n"
	 "axis not listed gets size 1).\n"
	 "\n"
	 "options:\n"
	 "  -o NAME                the executable to write\n"
	 "  -D name=value          override a `let` constant (repeatable)\n"
	 "  --mesh axis=size,...   replace the declared mesh sizes\n"
	 "  --train key=value      set a train setting, replacing the file's (repeatable;\n"
	 "                         the value as written after the key in the train\n"
	 "                         section): --train zero=3, --train \"zero=3 over dp\",\n"
	 "                         --train reshard_after_forward=false, --train steps=50\n"
	 "  -v, --verbose          print the planned bytes per arena and the cc command\n"
	 "  --time-passes          print the time of loading, each pass and the plan\n"
	 "                         (wall and CPU) on standard error\n"
	 "  --keep-c               keep the generated C as NAME.dtm.c\n"
	 "  --cuda                 also embed the CUDA kernels (one per plan kernel, see\n"
	 "                         dtmc help cuda-src), which the binary compiles with\n"
	 "                         NVRTC when run with --device cuda\n",
	 cmd_build, false, true, NULL},
	{"cuda-src", "write the CUDA source of a model's kernels",
	 "usage: dtmc cuda-src FILE -o FILE.cu [-D name=value]... [--mesh axis=size,...]\n"
	 "                  [--train key=value]... [--time-passes]\n"
	 "\n"
	 "Runs the pass pipeline as `dtmc build` does and writes the CUDA C++ source\n"
	 "that `dtmc build --cuda` embeds: one extern \"C\" kernel per plan kernel (the\n"
	 "C back end's k_ID names), shapes as constants, self-contained (NVRTC\n"
	 "compiles it without an include path).  `-o -` writes to standard output.\n"
	 "tools/nvrtc_check compiles such a file for sm_80 and sm_90 (the `cuda`\n"
	 "tests).\n"
	 "\n"
	 "options:\n"
	 "  -o FILE.cu             the file to write (- for standard output)\n"
	 "  -D name=value          override a `let` constant (repeatable)\n"
	 "  --mesh axis=size,...   replace the declared mesh sizes\n"
	 "  --train key=value      set a train setting (repeatable), e.g.\n"
	 "                         --train precision=bf16\n"
	 "  -v, --verbose          name each pass as it runs\n"
	 "  --time-passes          print the time of loading, each pass and the plan\n"
	 "                         (wall and CPU) on standard error\n"
	 ,
	 cmd_cuda_src, false, true, NULL},
	{"export-mlir", "write a model's global or per-rank program as MLIR (verified by MLIR)",
	 "usage: dtmc export-mlir FILE [--after=PASS] [--rank R] [-o OUT.mlir] [-D name=value]...\n"
	 "                  [--mesh axis=size,...] [--train key=value]...\n"
	 "\n"
	 "Writes the global program as lowering produced it as one MLIR module:\n"
	 "`mesh.mesh @mesh` (every mesh axis; their names in dtm.mesh_axes), and\n"
	 "`func.func @forward` taking the params and inputs (dtm.name, dtm.role,\n"
	 "dtm.attr) and returning the loss, each known placement a `mesh.shard`.\n"
	 "Elementwise ops are arith and math, matmul linalg.matmul or linalg.generic,\n"
	 "reductions linalg.reduce, softmax, transpose, reshape, concat and slice\n"
	 "linalg and tensor ops; the ops MLIR has no equivalent for (attention, the\n"
	 "norms, the losses, embed, rope, dropout, the routing ops, gelu, silu,\n"
	 "sigmoid, relu, log_softmax) are calls of declared functions @dtm.OP.N,\n"
	 "their semantics ir/ops.def's, dtm's attributes in dtm.attr.  The op that\n"
	 "defines a value carries its name, pipeline stage and block instance\n"
	 "(dtm.name, dtm.stage, dtm.block), so `dtmc import-mlir` reads back the same\n"
	 "program and exporting the .mlir file writes it unchanged.\n"
	 "\n"
	 "With --after=partition, the program rank R runs instead: its pipeline\n"
	 "stage's part of the partitioned training step, on local shapes, as\n"
	 "`func.func @step` (dtm.rank, dtm.coords, dtm.stage; each argument's\n"
	 "placement a #mesh.shard in dtm.sharding), returning the loss where the\n"
	 "stage has it.  dtm's collectives are mesh ops on @mesh (mesh.all_reduce,\n"
	 "all_gather, reduce_scatter, all_to_all, broadcast; shard_slice\n"
	 "mesh.all_slice), or @dtm calls where MLIR's shapes differ (an uneven\n"
	 "shard's); a value another stage reads is sent and received as calls of\n"
	 "@dtm.send.N and @dtm.recv.N.  --after=pipeline: the program after the\n"
	 "pipeline split, with its schedule and dtm's own sends and receives (also\n"
	 "fsdp_units, coalesce, bucket: the passes between).\n"
	 "\n"
	 "MLIR parses and verifies the module (through its C API, libdtm_mlir.so)\n"
	 "before it is written, in MLIR's own printed form.  Needs dtm built with\n"
	 "MLIR 19 (Debian's libmlir-19-dev).\n"
	 "\n"
	 "options:\n"
	 "  -o OUT.mlir            the file to write (default: standard output)\n"
	 "  --after=PASS           lower (default: the global program), or partition,\n"
	 "                         fsdp_units, coalesce, bucket, pipeline (a rank's)\n"
	 "  --rank R               the rank whose program is written (default 0)\n"
	 "  -D, --mesh, --train    as for dtmc build\n",
	 cmd_export_mlir, true, true, NULL},
	{"import-mlir", "read an MLIR model (linalg + mesh) as dtm's IR text",
	 "usage: dtmc import-mlir IN.mlir [-o OUT.ir] [--mesh axis=size,...]\n"
	 "                  [--train key=value]...\n"
	 "\n"
	 "Reads an MLIR module, which MLIR parses and verifies (through its C API,\n"
	 "libdtm_mlir.so), and writes the program dtm builds from it as IR text\n"
	 "(as `dtmc print --after=lower`), each node located in the .mlir file.\n"
	 "Every command that takes a model takes IN.mlir the same way: `dtmc build\n"
	 "IN.mlir -o NAME`, check, print, inspect, export-mlir (sweep: .dtm only).\n"
	 "\n"
	 "The module: a `mesh.mesh` (its axes named by the module's dtm.mesh_axes,\n"
	 "else dp, tp for two axes; pp, dp, tp for three), and the function to train\n"
	 "(the only one with a body, or @forward), returning the loss as tensor<f32>.\n"
	 "Its arguments are the params, and the inputs where dtm.role = \"input\"\n"
	 "(dtm.name names them, else argN; dtm.attr = \"{init = normal(0, 0.02)}\"\n"
	 "sets a param's init).  `mesh.shard %x to <@mesh, [[0], [], [1]], partial =\n"
	 "sum[2]>` places x.  The ops: arith.addf/subf/mulf/divf/negf/extf/truncf,\n"
	 "math.exp/log/sqrt/rsqrt/tanh, splat arith.constant, linalg.broadcast,\n"
	 "linalg.matmul, linalg.batch_matmul and the batched-matmul linalg.generic\n"
	 "into a zero linalg.fill, linalg.reduce (addf, maximumf; times 1/count:\n"
	 "mean), elementwise linalg.generic (broadcast maps; a body of those arith\n"
	 "and math ops, scalar constants, maximumf with 0: relu) and reduction ones\n"
	 "(addf, maximumf), linalg.add/sub/mul/div/exp/log/negf/sqrt/rsqrt/tanh,\n"
	 "linalg.softmax, linalg.transpose, tensor.reshape/expand_shape/\n"
	 "collapse_shape/concat/extract_slice, and `func.call @dtm.OP.N` for dtm's\n"
	 "other ops (what export-mlir writes).  Another op is an error naming it at\n"
	 "its line and column.  The module's dtm.train holds the train section\n"
	 "(default: as a .dtm model without one); --mesh and --train change it as\n"
	 "for a .dtm model, but for pp, whose stages the module fixes.\n"
	 "\n"
	 "options:\n"
	 "  -o OUT.ir              the file to write (default: standard output)\n"
	 "  --mesh, --train        as for dtmc build\n",
	 cmd_import_mlir, false, true, NULL},
	{"mlir-spmd", "compare dtm's forward collectives with MLIR's own spmdization",
	 "usage: dtmc mlir-spmd FILE [--json] [-o CUT.mlir] [-D name=value]...\n"
	 "                  [--mesh axis=size,...] [--train key=value]...\n"
	 "\n"
	 "A second opinion on dtm's partition from MLIR 19's own passes.  The forward\n"
	 "program, with the placements dtm's propagate decided, is cut where MLIR\n"
	 "cannot spmdize an op (calls of @dtm functions, reductions, reshapes): each\n"
	 "maximal run of matmuls and elementwise ops becomes a func.func @rK written\n"
	 "in linalg, its arguments and results a mesh.shard to dtm's placement, each\n"
	 "op's init an argument of its own.  MLIR's\n"
	 "  builtin.module(func.func(sharding-propagation,mesh-spmdization))\n"
	 "runs on each through its C API, and the collectives it inserts (kind, mesh\n"
	 "axes, the bytes of one rank's operand) are listed beside those dtm's\n"
	 "partition inserts for the same nodes, with a verdict: agree, or differs\n"
	 "(only dtm, only MLIR, or how many each).  MLIR 19 leaves an ill-typed\n"
	 "scf.if behind when a reduction over one mesh axis has a result split over\n"
	 "another: its result is read unverified, and the region says so.  Each\n"
	 "region runs in a child process: one MLIR cannot spmdize, or crashes on,\n"
	 "is listed as such.  Needs dtm built with MLIR 19.\n"
	 "\n"
	 "options:\n"
	 "  --json                 the comparison as JSON\n"
	 "  -o CUT.mlir            also write the cut module (what the passes get),\n"
	 "                         for mlir-opt-19 by hand\n"
	 "  -D, --mesh, --train    as for dtmc build\n",
	 cmd_mlir_spmd, false, true, NULL},
	{"inspect", "show a layout's communication, memory and step time, without running",
	 "usage: dtmc inspect FILE [-D name=value]... [--mesh axis=size,...] [--train key=value]...\n"
	 "                  [--hw NAME|FILE] [--nodes K] [--rank R] [--json] [--trace FILE]\n"
	 "                  [--dot FILE [--dot-scope SCOPE]] [--time-passes]\n"
	 "\n"
	 "Compiles FILE as `dtmc build` does and reports, from the same plan the binary\n"
	 "runs, without running it:\n"
	 "  - per pipeline stage, at one mesh coordinate (--rank's, in each stage), every\n"
	 "    collective and send/recv in order: kind, mesh axes, the group's ranks (or\n"
	 "    the peer), dtype, bytes per rank, ring send-side bytes per rank, time,\n"
	 "    the tensor moved, phase and micro-batch;\n"
	 "  - totals per step by mesh axes and by collective kind (send-side bytes per\n"
	 "    rank, ring formulas, and time);\n"
	 "  - memory per rank: params, gradients, master weights, optimizer state\n"
	 "    (and the padding of uneven shards in them, on this rank and at most),\n"
	 "    inputs, the activation arena (what is live at its peak: activations,\n"
	 "    gathered ZeRO-3 units, communication results; micro-batches in flight),\n"
	 "    the arenas, and the peak: their sum, exactly what a rank allocates\n"
	 "    (`./NAME -v` prints it); the overlap thread's staging copies apart;\n"
	 "  - the step time of the cost model (roofline kernels, alpha-beta\n"
	 "    communication per link class, all_to_all at the link's own a2a\n"
	 "    bandwidth, overlap as the two streams allow), the pipeline bubble,\n"
	 "    tokens/s and MFU (llm.c: 6N + 6LCT FLOPs per token).\n"
	 "\n"
	 "options:\n"
	 "  -D, --mesh, --train    as for dtmc build\n"
	 "  --hw NAME|FILE         hardware profile: h100 (default), h200, a100, b200,\n"
	 "                         cpu, or a file of overrides (`base = h100`, then\n"
	 "                         `key = value` lines; see tools/hw.h)\n"
	 "  --nodes K              spread the ranks over K nodes (default: the\n"
	 "                         profile's devices per node)\n"
	 "  --rank R               the mesh coordinate shown (default 0)\n"
	 "  --json                 the report as JSON\n"
	 "  --time-passes          print the time of loading, each pass and the plan\n"
	 "                         (wall and CPU) on standard error\n"
	 "  --trace FILE           the simulated timeline as a Chrome trace (Perfetto,\n"
	 "                         chrome://tracing): one track per rank and stream\n"
	 "  --dot FILE             the partitioned programs of --rank's pipeline (one per\n"
	 "                         stage) as a graphviz graph: clusters per stage,\n"
	 "                         micro-batch and block instance, a legend; each node\n"
	 "                         shows its global type @ placement and its local shard\n"
	 "                         (`dot -Tsvg FILE -o FILE.svg` draws it)\n"
	 "  --dot-scope SCOPE      draw only part of it, with stubs for the edges that\n"
	 "                         leave the part: comma-separated stage=S, mb=K and\n"
	 "                         block instances (layer.1 or block=layer.1); terms of\n"
	 "                         one kind add up, kinds intersect: layer.1,mb=0\n",
	 cmd_inspect, false, false, NULL},
	{"sweep", "compile and cost every parallel layout on N devices, rank them",
	 sweep_help, NULL, false, false, sweep_main},
	{"calibrate", "measure this machine into a hardware profile for the cost model",
	 calibrate_help, NULL, false, false, calibrate_main},
	{"ckpt", "inspect, merge and split checkpoints (safetensors)",
	 "usage: dtmc ckpt info DIR\n"
	 "       dtmc ckpt merge DIR -o OUT.safetensors [--params]\n"
	 "       dtmc ckpt split IN.safetensors MODEL -o DIR [-D name=value]...\n"
	 "                       [--mesh axis=size,...] [--train key=value]...\n"
	 "\n"
	 "DIR is a checkpoint directory a training binary wrote with --save (its\n"
	 "`latest` step) or one of its step directories.\n"
	 "  info   the step, seed, data position, mesh; every tensor's dtype, global\n"
	 "         shape and placement; what each rank file holds (its mesh\n"
	 "         coordinates, tensors and their shard shapes).\n"
	 "  merge  one safetensors file of whole tensors, each assembled from its\n"
	 "         shards (the first copy of each), dtypes kept (bf16 stays bf16),\n"
	 "         with the checkpoint's step, seed, data position and model in its\n"
	 "         metadata: what the Python safetensors package and PyTorch load.\n"
	 "         --params: the params only (a state dict), no optimizer state.\n"
	 "  split  a safetensors file of whole tensors (merge's, or PyTorch's\n"
	 "         save_file of a state dict) into a checkpoint directory for MODEL\n"
	 "         built with -D, --mesh and --train as for dtmc build: each rank's\n"
	 "         file holds its shards; optimizer state the file lacks starts at\n"
	 "         zero, a master copy at its param.  `./NAME --resume DIR` continues\n"
	 "         from it (step, seed and data position from the file's metadata,\n"
	 "         else step 0).  Any checkpoint also resumes on any other layout of\n"
	 "         its model directly (each rank reads the parts it needs).\n",
	 NULL, false, false, ckpt_main},
	{"tokenize", "turn a text file into an llm.c token file (bytes as tokens)",
	 "usage: dtmc tokenize IN.txt OUT.bin\n"
	 "\n"
	 "Writes an llm.c token file (header of 256 int32: magic 20240520, version,\n"
	 "token count; then the tokens as uint16) with vocab 256: each byte of IN is\n"
	 "one token.  The training binary reads it with --data OUT.bin.\n",
	 NULL, false, false, cmd_tokenize},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage_error(const char *fmt, const char *arg)
{
	fputs("dtmc: error: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs(" (see dtmc --help)\n", stderr);
}

static void print_passes(FILE *out)
{
	fputs("lower", out);
	for (const Pass *p = pass_list(); p->name; p++)
		fprintf(out, ", %s", p->name);
}

static void print_help(FILE *out)
{
	fputs("usage: dtmc COMMAND [options] FILE\n"
	      "\n"
	      "dtm compiles .dtm model files (a network, a device mesh with named axes and\n"
	      "per-tensor placements) for distributed training.\n"
	      "\n"
	      "commands:\n",
	      out);
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
	fputs("  help      show a command's options: dtmc help COMMAND\n"
	      "\n"
	      "options:\n"
	      "  -h, --help     show this help\n"
	      "  --version      show the version\n",
	      out);
}

static const Command *find_command(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static int print_command_help(const Command *c)
{
	fputs(c->help, stdout);
	if (c->has_after || c->run == cmd_opt) {
		fputs("\npasses, in pipeline order: ", stdout);
		print_passes(stdout);
		fputc('\n', stdout);
	}
	return 0;
}

/* `-D name=value`: the name must be non-empty; the value's syntax is the
 * lowering's to check (it knows the constant's type).  The argument is cut
 * at '=' in place: argv strings are writable and live until main returns. */
static bool add_define(Args *args, char *def)
{
	char *eq = strchr(def, '=');
	if (!eq || eq == def || !eq[1]) {
		fprintf(stderr, "dtmc: error: expected -D name=value, got '%s'\n", def);
		return false;
	}
	if (args->lower.ndefines >= LOWER_MAX_DEFINES) {
		fprintf(stderr, "dtmc: error: too many -D options (at most %d)\n",
		        LOWER_MAX_DEFINES);
		return false;
	}
	*eq = 0;
	args->lower.define_names[args->lower.ndefines] = def;
	args->lower.define_values[args->lower.ndefines] = eq + 1;
	args->lower.ndefines++;
	return true;
}

/* Returns the value of option `name` given as `name=V`, `name V` (advancing
 * *i), or NULL when arg is not this option.  *missing is set when the option
 * is present but has no value. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
	const char *arg = argv[*i];
	size_t n = strlen(name);
	if (strncmp(arg, name, n) != 0)
		return NULL;
	if (arg[n] == '=')
		return arg + n + 1;
	if (arg[n] != 0)
		return NULL;
	if (*i + 1 >= argc) {
		*missing = true;
		return NULL;
	}
	return argv[++*i];
}

/* Parses a command's arguments (argv[0] is the command).  Returns 0 when the
 * command should run, 1 on a usage error (reported), 2 when help was
 * printed. */
static int parse_args(const Command *c, int argc, char **argv, Args *args)
{
	bool only_files = false;
	for (int i = 1; i < argc; i++) {
		char *arg = argv[i];
		const char *v;
		bool missing = false;
		if (only_files || arg[0] != '-' || strcmp(arg, "-") == 0) {
			if (args->file) {
				fprintf(stderr, "dtmc: error: more than one input file ('%s' and '%s')\n",
				        args->file, arg);
				return 1;
			}
			args->file = arg;
		} else if (strcmp(arg, "--") == 0) {
			only_files = true;
		} else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
			print_command_help(c);
			return 2;
		} else if (strcmp(arg, "-v") == 0 || strcmp(arg, "--verbose") == 0) {
			args->verbose = true;
		} else if (strcmp(arg, "--time-passes") == 0) {
			args->time_passes = true;
		} else if (strncmp(arg, "-D", 2) == 0) {
			if (!arg[2] && i + 1 >= argc) {
				usage_error("option '%s' needs name=value", "-D");
				return 1;
			}
			if (!add_define(args, arg[2] ? arg + 2 : argv[++i]))
				return 1;
		} else if ((v = opt_value(argc, argv, &i, "--mesh", &missing)) || missing) {
			if (missing) {
				usage_error("option '%s' needs axis=size,...", "--mesh");
				return 1;
			}
			args->lower.mesh = v;
		} else if ((v = opt_value(argc, argv, &i, "--train", &missing)) || missing) {
			if (missing || !*v) {
				usage_error("option '%s' needs key=value", "--train");
				return 1;
			}
			if (args->lower.ntrain >= LOWER_MAX_TRAIN) {
				fprintf(stderr, "dtmc: error: too many --train options (at most %d)\n",
				        LOWER_MAX_TRAIN);
				return 1;
			}
			args->lower.train[args->lower.ntrain++] = v;
		} else if (c->has_output && strcmp(arg, "--keep-c") == 0) {
			args->keep_c = true;
		} else if (c->run == cmd_build && strcmp(arg, "--cuda") == 0) {
			args->cuda = true;
		} else if ((c->run == cmd_inspect || c->run == cmd_mlir_spmd) &&
		           strcmp(arg, "--json") == 0) {
			args->json = true;
		} else if ((c->run == cmd_inspect &&
		            (((v = opt_value(argc, argv, &i, "--hw", &missing)) || missing) ||
		             ((v = opt_value(argc, argv, &i, "--trace", &missing)) || missing) ||
		             ((v = opt_value(argc, argv, &i, "--dot-scope", &missing)) || missing) ||
		             ((v = opt_value(argc, argv, &i, "--dot", &missing)) || missing) ||
		             ((v = opt_value(argc, argv, &i, "--nodes", &missing)) || missing))) ||
		           ((c->run == cmd_inspect || c->run == cmd_export_mlir) &&
		            ((v = opt_value(argc, argv, &i, "--rank", &missing)) || missing))) {
			const char *name = strncmp(arg, "--hw", 4) == 0      ? "--hw"
			                   : strncmp(arg, "--trace", 7) == 0 ? "--trace"
			                   : strncmp(arg, "--dot-scope", 11) == 0 ? "--dot-scope"
			                   : strncmp(arg, "--dot", 5) == 0   ? "--dot"
			                   : strncmp(arg, "--nodes", 7) == 0 ? "--nodes"
			                                                     : "--rank";
			if (missing || !*v) {
				usage_error("option '%s' needs a value", name);
				return 1;
			}
			if (!strcmp(name, "--hw"))
				args->hw = v;
			else if (!strcmp(name, "--trace"))
				args->trace = v;
			else if (!strcmp(name, "--dot"))
				args->dot = v;
			else if (!strcmp(name, "--dot-scope"))
				args->dot_scope = v;
			else {
				bool nodes = !strcmp(name, "--nodes");
				char *end;
				errno = 0;
				long long n = strtoll(v, &end, 10);
				if (*end || errno || n < (nodes ? 1 : 0) || n > (1LL << 40)) {
					fprintf(stderr, "dtmc: error: %s wants a %s integer, got '%s'\n",
					        name, nodes ? "positive" : "non-negative", v);
					return 1;
				}
				if (nodes)
					args->nodes = n > (1 << 30) ? 1 << 30 : (int)n;
				else
					args->rank = n;
			}
		} else if (c->has_output && ((v = opt_value(argc, argv, &i, "-o", &missing)) || missing)) {
			if (missing) {
				usage_error("option '%s' needs a file name", "-o");
				return 1;
			}
			args->output = v;
		} else if (c->run == cmd_opt &&
		           ((v = opt_value(argc, argv, &i, "--pass", &missing)) || missing)) {
			if (missing || !*v) {
				usage_error("option '%s' needs a pass name", "--pass");
				return 1;
			}
			args->pass = v;
		} else if (c->has_after &&
		           ((v = opt_value(argc, argv, &i, "--after", &missing)) || missing)) {
			if (missing) {
				usage_error("option '%s' needs a pass name", "--after");
				return 1;
			}
			args->after = v;
		} else {
			usage_error("unknown option '%s'", arg);
			return 1;
		}
	}
	if (!args->file) {
		fprintf(stderr, "dtmc: error: no input file (see dtmc help %s)\n", c->name);
		return 1;
	}
	if ((c->run == cmd_export_mlir || c->run == cmd_import_mlir) && !args->output)
		args->output = "-";
	if (c->has_output && !args->output && c->run != cmd_mlir_spmd) {
		fprintf(stderr, "dtmc: error: no output file: give -o NAME (see dtmc help %s)\n",
		        c->name);
		return 1;
	}
	if (c->run == cmd_opt && !args->pass) {
		fprintf(stderr, "dtmc: error: no pass: give --pass=PASS (see dtmc help opt)\n");
		return 1;
	}
	if (args->pass && pass_position(args->pass) < 0) {
		fprintf(stderr, "dtmc: error: unknown pass '%s' for --pass (passes: ", args->pass);
		for (const Pass *p = pass_list(); p->name; p++)
			fprintf(stderr, "%s%s", p == pass_list() ? "" : ", ", p->name);
		fputs(")\n", stderr);
		return 1;
	}
	if (args->after && !pass_exists(args->after)) {
		fprintf(stderr, "dtmc: error: unknown pass '%s' for --after (known passes: ",
		        args->after);
		print_passes(stderr);
		fputs(")\n", stderr);
		return 1;
	}
	return 0;
}

static bool is_ir_input(const char *path)
{
	return drv_is_ir_path(path);
}

/* The driver's options from the command line's. */
static DrvOptions drv_options(const Args *args)
{
	static DrvProfile profile; /* --time-passes: one compile per process */
	DrvOptions o = {.lower = args->lower, .import_mlir = mlir_import_file,
	                .stop_after = args->after, .verbose = args->verbose,
	                .profile = args->time_passes ? &profile : NULL};
	return o;
}

/* --time-passes: what the compile's phases took, once the command is done
 * (whether or not it succeeded). */
static void print_times(const DrvOptions *o)
{
	if (o->profile)
		drv_profile_print(stderr, o->profile, 0, NULL);
}

/* Flushes stdout and turns a failed write (a full disk, a closed pipe) into
 * an error rather than a silent truncation. */
static bool flush_stdout(Diag *d)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		diag_error(d, (SrcLoc){0}, "cannot write to standard output");
		return false;
	}
	return true;
}

static int finish(Arena *a, Diag *d, bool ok, const DrvOptions *o)
{
	int rc = 0;
	if (!ok || d->nerr > 0) {
		diag_summary(d);
		rc = 1;
	}
	print_times(o);
	arena_free(a);
	return rc;
}

static int cmd_check(const Args *args)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	DrvOptions o = drv_options(args);
	Compiled c;
	bool ok = drv_load(&c, &a, &d, args->file, &o);
	IrModule *m = c.m;
	/* the pipeline stages as `build` decides them (stage annotations
	 * against the data flow are errors), on a copy: the summary shows the
	 * annotations */
	if (ok && pipeline_axis(m) >= 0 && !pass_has_run(m, "stages")) {
		Compiled staged = c;
		staged.m = ir_module_clone(&a, m);
		if (!staged.m)
			diag_error(&d, (SrcLoc){0}, "out of memory");
		o.stop_after = "stages";
		o.verbose = false;
		ok = staged.m && drv_run(&staged, &d, &o);
	}
	if (ok) {
		report_check(stdout, m);
		ok = flush_stdout(&d);
	}
	return finish(&a, &d, ok, &o);
}

static int cmd_print(const Args *args)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	DrvOptions o = drv_options(args);
	Compiled c;
	bool ok = drv_load(&c, &a, &d, args->file, &o);
	/* IR text is at whatever stage it was printed at (its `after` line):
	 * without --after it is printed as read.  A model runs the whole
	 * pipeline by default. */
	if (ok && (args->after || !is_ir_input(args->file)))
		ok = drv_run(&c, &d, &o);
	/* Print only a module that made it through: never half an output. */
	if (ok) {
		ir_print(stdout, c.m);
		ok = flush_stdout(&d);
	}
	return finish(&a, &d, ok, &o);
}

/* text to path whole or not at all (runtime/fsio.h: a temporary file,
 * fsync, rename), or to standard output for "-". */
static bool write_whole(Diag *d, const char *path, const char *text)
{
	if (strcmp(path, "-") == 0) {
		fputs(text, stdout);
		return flush_stdout(d);
	}
	char err[1024];
	if (rt_write_file_atomic(path, text, strlen(text), err, sizeof err) == 0)
		return true;
	diag_error(d, (SrcLoc){0}, "%s", err);
	return false;
}

/* The MLIR plugin, or NULL after saying what to install. */
static const DtmMlirApi *plugin(void)
{
	char err[1024];
	const DtmMlirApi *api = mlir_plugin(err, sizeof err);
	if (!api)
		fprintf(stderr, "dtmc: error: %s\n", err);
	return api;
}

/* `dtmc import-mlir`: an MLIR model as the IR text dtm builds from it,
 * written whole or not at all. */
static int cmd_import_mlir(const Args *args)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	DrvOptions o = drv_options(args);
	Compiled c;
	bool ok = true;
	if (!drv_is_mlir_path(args->file)) {
		diag_error(&d, (SrcLoc){.file = args->file}, "import-mlir reads an MLIR module (a "
		           "file ending in .mlir)");
		ok = false;
	}
	ok = ok && drv_load(&c, &a, &d, args->file, &o);
	char *text = NULL;
	size_t len = 0;
	FILE *f = ok ? open_memstream(&text, &len) : NULL;
	if (f) {
		ir_print(f, c.m);
		fclose(f);
	}
	if (ok && !text) {
		diag_error(&d, (SrcLoc){0}, "out of memory");
		ok = false;
	}
	ok = ok && write_whole(&d, args->output, text);
	free(text);
	return finish(&a, &d, ok, &o);
}

/* The model through every pass: the per-rank program of each pipeline
 * stage (the binary runs the mesh as threads or under mpirun), with its
 * analyses. */
static bool compile_all(Compiled *c, Arena *a, Diag *d, const Args *args, const DrvOptions *o)
{
	return drv_load(c, a, d, args->file, o) && drv_run(c, d, o) && drv_analyses(c, d);
}

static int cmd_build(const Args *args)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	Compiled c;
	DrvOptions o = drv_options(args);
	bool ok = compile_all(&c, &a, &d, args, &o);
	if (ok && args->verbose)
		cg_report_memory(stderr, c.an.mem);
	ok = ok && drv_plan(&c, &d, &o);
	if (ok) {
		CgBuildOptions bo = {args->output, args->verbose, args->keep_c, args->cuda};
		DrvClock t0 = drv_clock();
		ok = cg_build(c.m, c.an.fuse, c.an.mem, c.plan, &bo, &d);
		if (o.profile)
			drv_profile_add(o.profile, drv_profile_extra(o.profile, "emit C, cc"), t0);
	}
	return finish(&a, &d, ok, &o);
}

static int cmd_cuda_src(const Args *args)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	Compiled c;
	DrvOptions o = drv_options(args);
	bool ok = compile_all(&c, &a, &d, args, &o);
	if (ok) {
		DrvClock t0 = drv_clock();
		ok = cg_write_cuda_source(c.m, c.an.fuse, c.an.mem, args->output, cg_source_dir(), &d);
		if (o.profile)
			drv_profile_add(o.profile, drv_profile_extra(o.profile, "emit CUDA"), t0);
	}
	if (ok && strcmp(args->output, "-") == 0)
		ok = flush_stdout(&d);
	return finish(&a, &d, ok, &o);
}

/* `dtmc export-mlir`: the global program or a rank's as MLIR text
 * (tools/mlir.h), verified and printed by MLIR, written whole or not at
 * all. */
static int cmd_export_mlir(const Args *args)
{
	/* the global program, or a rank's up to pipeline: the passes after it
	 * check the program and plan kernels and memory, none of which the
	 * module carries, so their program is pipeline's */
	static const char *const local[] = {"partition", "fsdp_units", "coalesce", "bucket",
	                                    "pipeline", NULL};
	const char *after = args->after ? args->after : "lower";
	bool global = strcmp(after, "lower") == 0, known = global;
	for (int k = 0; local[k] && !known; k++)
		known = strcmp(after, local[k]) == 0;
	if (!known) {
		fprintf(stderr, "dtmc: error: export-mlir exports the global program (--after=lower) "
		        "or a rank's program (--after=partition, fsdp_units, coalesce, bucket or "
		        "pipeline), not the program after '%s'\n", after);
		return 1;
	}
	char err[1024];
	const DtmMlirApi *api = plugin();
	if (!api)
		return 1;
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	DrvOptions o = drv_options(args);
	o.stop_after = after;
	Compiled c;
	char *text = NULL, *out = NULL, *diag = NULL;
	bool ok = drv_load(&c, &a, &d, args->file, &o) && drv_run(&c, &d, &o);
	if (ok && !(global ? mlir_export_text(c.m, &text, err, sizeof err)
	                   : mlir_export_local_text(c.m, args->rank, &text, err, sizeof err))) {
		diag_error(&d, (SrcLoc){0}, "export-mlir: %s", err);
		ok = false;
	}
	if (ok && api->check(text, &out, &diag) != 0) {
		diag_error(&d, (SrcLoc){0}, "export-mlir: MLIR rejects the exported module (a dtm "
		           "bug):\n%s", diag ? diag : "");
		ok = false;
	}
	ok = ok && write_whole(&d, args->output, out);
	free(text);
	free(out);
	free(diag);
	return finish(&a, &d, ok, &o);
}

/* `dtmc mlir-spmd`: the global program after propagate (a copy kept) and
 * after partition, compared by tools/mlir_spmd.c through MLIR's passes. */
static int cmd_mlir_spmd(const Args *args)
{
	char err[1024];
	const DtmMlirApi *api = plugin();
	if (!api)
		return 1;
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	DrvOptions o = drv_options(args);
	o.stop_after = "propagate";
	Compiled c;
	char *cut = NULL;
	bool ok = drv_load(&c, &a, &d, args->file, &o) && drv_run(&c, &d, &o);
	IrModule *g = ok ? ir_module_clone(&a, c.m) : NULL;
	o.stop_after = "partition";
	ok = ok && g && drv_run(&c, &d, &o);
	/* the cut module first: what to run mlir-opt-19 on when MLIR fails */
	if (ok && args->output) {
		cut = mlir_spmd_cut(g);
		FILE *f = cut ? fopen(args->output, "w") : NULL;
		if (!f || fputs(cut, f) < 0 || fclose(f) != 0) {
			diag_error(&d, (SrcLoc){0}, "cannot write '%s': %s", args->output,
			           cut ? strerror(errno) : "out of memory");
			ok = false;
		}
	}
	if (ok && !mlir_spmd_compare(g, c.m, api, stdout, args->json, err, sizeof err)) {
		diag_error(&d, (SrcLoc){0}, "mlir-spmd: %s", err);
		ok = false;
	}
	ok = ok && flush_stdout(&d);
	free(cut);
	return finish(&a, &d, ok, &o);
}

/* `dtmc opt --pass=NAME`: one pass on IR text, the IR it leaves printed
 * (and the analyses' results, for fuse and memplan). */
static int cmd_opt(const Args *args)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	DrvOptions o = drv_options(args);
	o.stop_after = args->pass;
	if (!is_ir_input(args->file)) {
		fprintf(stderr, "dtmc: error: opt reads IR text (a .ir file or -), not a model "
		        "('%s'): dtmc print --after=PASS makes it\n", args->file);
		return 1;
	}
	Compiled c;
	bool ok = drv_load(&c, &a, &d, args->file, &o) &&
	          drv_check_opt_input(&c, &d, args->file, args->pass) && drv_run(&c, &d, &o);
	if (ok) {
		ir_print(stdout, c.m);
		/* the result of the analysis that ran */
		drv_print_analyses(stdout, &c, !strcmp(args->pass, "fuse"),
		                   !strcmp(args->pass, "memplan"));
		ok = flush_stdout(&d);
	}
	return finish(&a, &d, ok, &o);
}

/* `dtmc inspect`: a model only (IR text has no train section to cost). */
static int cmd_inspect(const Args *args)
{
	if (is_ir_input(args->file)) {
		fprintf(stderr, "dtmc: error: inspect reads .dtm models, not IR text ('%s')\n",
		        args->file);
		return 1;
	}
	InspectOptions o = {.file = args->file, .hw = args->hw, .nodes = args->nodes,
	                    .rank = args->rank, .json = args->json, .trace = args->trace,
	                    .dot = args->dot, .dot_scope = args->dot_scope};
	if (args->dot_scope && !args->dot) {
		fprintf(stderr, "dtmc: error: --dot-scope needs --dot FILE\n");
		return 1;
	}
	/* inspect has always taken at most 32 of each */
	const LowerOptions *lo = &args->lower;
	int cap = 32;
	if (lo->ndefines > cap || lo->ntrain > cap) {
		fprintf(stderr, "dtmc: error: inspect takes at most %d -D and %d --train options\n",
		        cap, cap);
		return 1;
	}
	o.lower = *lo;
	o.time_passes = args->time_passes;
	return inspect_main(&o);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		print_help(stderr);
		return 1;
	}
	const char *cmd = argv[1];
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
		print_help(stdout);
		return 0;
	}
	if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
		printf("dtmc %s\n", DTMC_VERSION);
		return 0;
	}
	if (strcmp(cmd, "help") == 0) {
		if (argc < 3) {
			print_help(stdout);
			return 0;
		}
		const Command *c = find_command(argv[2]);
		if (!c) {
			usage_error("unknown command '%s'", argv[2]);
			return 1;
		}
		return print_command_help(c);
	}
	if (cmd[0] == '-') {
		usage_error("unknown option '%s'", cmd);
		return 1;
	}
	const Command *c = find_command(cmd);
	if (!c) {
		usage_error("unknown command '%s'", cmd);
		return 1;
	}
	if (c->main)
		return c->main(argc - 1, argv + 1);
	Args args = {0};
	int rc = parse_args(c, argc - 1, argv + 1, &args);
	if (rc == 0)
		rc = c->run(&args);
	else if (rc == 2)
		rc = 0;
	return rc;
}
