# run.cmake - the script-driven tests (included by tests/CMakeLists.txt).
#
#   golden.NAME     dtmc print --after=lower models/NAME.dtm == tests/golden/NAME.lower.ir
#   roundtrip.NAME  print --after=lower | print - gives identical text
#   resume.NAME     the IR printed after each pass, fed back, goes on to the IR
#                   of the whole pipeline (IR text says `after PASS`)
#   diag.NAME       dtmc check tests/diag/NAME.dtm (or .ir; a case may name another
#                   command and a memory limit): exact stderr, exit status 1
#   diag.stress.*   generated inputs (a 1 MB line, 10,000-deep nesting): exit 1,
#                   an error, bounded output, no crash or hang
#   fuzz.frontend   a bounded libFuzzer run over the front end, the IR parser,
#                   the MLIR import, checkpoint files and hardware profiles
#
# Every runner takes --update to rewrite its expectations (see README).
find_program(DTM_BASH bash REQUIRED)
set(DTM_ROOT ${CMAKE_SOURCE_DIR})

foreach(src ${DTM_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  set_tests_properties(unit.${name} PROPERTIES TIMEOUT 120 LABELS unit)
endforeach()

file(GLOB DTM_MODELS CONFIGURE_DEPENDS ${DTM_ROOT}/models/*.dtm)
foreach(model ${DTM_MODELS})
  get_filename_component(name ${model} NAME_WE)
  add_test(NAME golden.${name}
           COMMAND ${DTM_BASH} ${DTM_TESTS}/golden/run.sh $<TARGET_FILE:dtmc> ${name}
           WORKING_DIRECTORY ${DTM_ROOT})
  add_test(NAME roundtrip.${name}
           COMMAND ${DTM_BASH} ${DTM_TESTS}/golden/run.sh --roundtrip $<TARGET_FILE:dtmc> ${name}
           WORKING_DIRECTORY ${DTM_ROOT})
  add_test(NAME resume.${name}
           COMMAND ${DTM_BASH} ${DTM_TESTS}/golden/run.sh --resume $<TARGET_FILE:dtmc> ${name}
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(golden.${name} roundtrip.${name} resume.${name} PROPERTIES TIMEOUT 60
                       LABELS golden)
endforeach()

#   passes.PASS     each tests/passes/PASS/CASE.ir through `dtmc opt --pass=PASS`:
#                   the IR (CASE.out) or the diagnostics (CASE.err) expected;
#                   passes.coverage: every pass of the registry has such tests
file(GLOB DTM_PASS_DIRS LIST_DIRECTORIES true CONFIGURE_DEPENDS ${DTM_TESTS}/passes/*)
foreach(pdir ${DTM_PASS_DIRS})
  if(IS_DIRECTORY ${pdir})
    get_filename_component(pname ${pdir} NAME)
    add_test(NAME passes.${pname}
             COMMAND ${DTM_BASH} ${DTM_TESTS}/passes/run.sh $<TARGET_FILE:dtmc> ${pname}
             WORKING_DIRECTORY ${DTM_ROOT})
    set_tests_properties(passes.${pname} PROPERTIES TIMEOUT 60 LABELS passes)
  endif()
endforeach()
add_test(NAME passes.coverage
         COMMAND ${DTM_BASH} ${DTM_TESTS}/passes/run.sh --coverage $<TARGET_FILE:dtmc>
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(passes.coverage PROPERTIES TIMEOUT 60 LABELS passes)

file(GLOB DTM_DIAG_CASES CONFIGURE_DEPENDS ${DTM_TESTS}/diag/*.dtm ${DTM_TESTS}/diag/*.ir)
foreach(case ${DTM_DIAG_CASES})
  get_filename_component(name ${case} NAME_WE)
  add_test(NAME diag.${name}
           COMMAND ${DTM_BASH} ${DTM_TESTS}/diag/run.sh $<TARGET_FILE:dtmc> ${name}
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(diag.${name} PROPERTIES TIMEOUT 60 LABELS diag)
endforeach()

foreach(kind long_line long_ident deep_parens deep_neg deep_calls deep_blocks many_errors)
  add_test(NAME diag.stress.${kind}
           COMMAND ${DTM_BASH} ${DTM_TESTS}/diag/stress.sh $<TARGET_FILE:dtmc> ${kind}
                   ${CMAKE_CURRENT_BINARY_DIR}/stress
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(diag.stress.${kind} PROPERTIES TIMEOUT 60 LABELS diag)
endforeach()

#   diag.scale.params  100,000 params check and inspect in CPU seconds (the
#                      compiler is linear in the parameter count)
add_test(NAME diag.scale.params
         COMMAND ${DTM_BASH} ${DTM_TESTS}/diag/scale.sh $<TARGET_FILE:dtmc>
                 ${CMAKE_CURRENT_BINARY_DIR}/scale
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(diag.scale.params PROPERTIES TIMEOUT 300 LABELS diag)

# The fuzz run builds its own clang/libFuzzer tree (tests/fuzz/run.sh), so it
# is registered in every build; DTM_FUZZ=ON is that tree's configuration.
if(NOT DTM_FUZZ)
  add_test(NAME fuzz.frontend
           COMMAND ${DTM_BASH} ${DTM_TESTS}/fuzz/run.sh ${CMAKE_CURRENT_BINARY_DIR}/fuzz
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(fuzz.frontend PROPERTIES TIMEOUT 400 LABELS fuzz)
endif()

if(DTM_FUZZ)
  add_subdirectory(${DTM_TESTS}/fuzz ${CMAKE_CURRENT_BINARY_DIR}/fuzz-targets)
endif()

# ---- oracle: dtm against PyTorch (tests/oracle, issue 3 point 10) ----
#   oracle.NAME  build models/NAME.dtm with --mesh dp=1, train 20 steps, and
#                train the same steps in PyTorch from dtm's step-0 checkpoint
#                on the batches dtm dumped: losses and final weights must
#                agree to 1e-4.  Needs /usr/bin/python3 with torch (deps.sh);
#                without it the test fails and says what to install.
#                oracle.moe also prints the choices its routing drops per
#                step and layer (moe.dtm's capacity drops some every step)
#                and checks PyTorch's slots against support/route.h's loop.
foreach(name mlp gpt llama moe)
  add_test(NAME oracle.${name}
           COMMAND ${DTM_BASH} ${DTM_TESTS}/oracle/run.sh $<TARGET_FILE:dtmc>
                   ${DTM_ROOT}/models/${name}.dtm --steps 20
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(oracle.${name} PROPERTIES TIMEOUT 300 LABELS oracle)
endforeach()
# ---- end oracle ----

# ---- e2e: dtmc build, then train (tests/e2e, issue 3 points 4-5) ----
#   e2e.NAME  build models/NAME.dtm with --mesh dp=1; the step-1 loss must
#             match ir_eval's f64 loss to 1e-5, the runtime must allocate the
#             planned arena bytes, and the loss must fall over 50 steps.
add_executable(dtm_refloss ${DTM_TESTS}/e2e/refloss.c)
target_link_libraries(dtm_refloss PRIVATE dtm_frontend dtm_interp dtm_ir dtm_runtime)
dtm_layer_includes(dtm_refloss frontend interp runtime)
foreach(name mlp gpt llama)
  add_test(NAME e2e.${name}
           COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/train.sh $<TARGET_FILE:dtmc>
                   $<TARGET_FILE:dtm_refloss> ${name}
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(e2e.${name} PROPERTIES TIMEOUT 300 LABELS e2e)
endforeach()
#   e2e.precision  tests/e2e/mixed_loss.dtm (a loss adding f32 and bf16
#             terms, a user's cast) trained 20 steps in bf16 (one device,
#             dp=2,tp=2, 2 micro-batches on dp=2 with f32 and with bf16
#             reduce_dtype, no master) and f16 gives f32's losses and grad
#             norms to each one's measured tolerance (issues 14.2, 16.3); the
#             gradients cross dp once per step, in reduce_dtype.
add_test(NAME e2e.precision
         COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/precision.sh $<TARGET_FILE:dtmc>
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(e2e.precision PROPERTIES TIMEOUT 300 LABELS e2e)
#   e2e.loss_scale  f16's dynamic loss scaling on a one-layer GPT whose
#             batches repeat: the scale backs off and grows by GradScaler's
#             rule, skipped steps change nothing, losses are f32's shifted
#             by the skips (one device and dp=2), a resume continues
#             identically (issue 16.3, 16.4).
add_test(NAME e2e.loss_scale
         COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/loss_scale.sh $<TARGET_FILE:dtmc>
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(e2e.loss_scale PROPERTIES TIMEOUT 300 LABELS e2e)
# ---- end e2e ----

# ---- mpi: the collectives and DDP under mpirun (issue 4 points 5, 8) ----
#   mpi.comm       test_comm's checks, one process per rank (4)
#   mpi.comm_dead  rank 2 fails: the others must say "rank 2 failed", exit
#   mpi.comm_stopped  rank 2 stops itself (SIGSTOP) before an all_reduce: the
#                  others time out at 2 s naming rank 2 as not arrived (it
#                  answers no probe), and the job ends
#   mpi.comm_ddp   the 4-rank DDP plan on mpi gives the one-rank losses
# Built when CMake finds MPI (the MPI section of CMakeLists.txt); skipped
# with a message when mpirun is absent.  Open MPI refuses root unless told,
# and a container has fewer cores than ranks, hence the environment and
# --oversubscribe; vader's single-copy (CMA) needs ptrace, which containers
# often forbid.
if(TARGET dtm_comm_mpi)
  target_link_libraries(test_comm PRIVATE dtm_comm_mpi)
  target_link_libraries(test_comm_ddp PRIVATE dtm_comm_mpi)
  target_link_libraries(test_overlap PRIVATE dtm_comm_mpi)
  set(DTM_MPI_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
      OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1)
  if(DTM_MPIRUN)
    set(DTM_MPIRUN_4 ${DTM_MPIRUN} -np 4 --oversubscribe)
    add_test(NAME mpi.comm COMMAND ${DTM_MPIRUN_4} $<TARGET_FILE:test_comm> --mpi)
    add_test(NAME mpi.comm_dead COMMAND ${DTM_MPIRUN_4} $<TARGET_FILE:test_comm> --mpi --dead)
    add_test(NAME mpi.comm_ddp COMMAND ${DTM_MPIRUN_4} $<TARGET_FILE:test_comm_ddp> --mpi)
    add_test(NAME mpi.comm_stopped
             COMMAND ${DTM_MPIRUN_4} $<TARGET_FILE:test_comm> --mpi --stopped)
    set_tests_properties(mpi.comm mpi.comm_dead mpi.comm_ddp mpi.comm_stopped PROPERTIES
      TIMEOUT 120 LABELS mpi ENVIRONMENT "${DTM_MPI_ENV}")
    set_tests_properties(mpi.comm_stopped PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
      "rank [013]: rank [013] timed out after 2 s in all_reduce over {dp} waiting for rank 2 \\(no answer from 2")
    # the exit status is 1 by design; the output must name the dead rank
    set_tests_properties(mpi.comm_dead PROPERTIES
      PASS_REGULAR_EXPRESSION "rank [013]: rank 2 failed: boom on purpose")
    #   mpi.overlap       the communication thread on mpi (--overlap): a
    #                     kernel runs while an all_reduce is in flight, the
    #                     ones touching its buffers wait for it
    #   mpi.overlap_dead  rank 2 dies inside an asynchronous all_reduce
    add_test(NAME mpi.overlap COMMAND ${DTM_MPIRUN_4} $<TARGET_FILE:test_overlap> --mpi)
    add_test(NAME mpi.overlap_dead
             COMMAND ${DTM_MPIRUN_4} $<TARGET_FILE:test_overlap> --mpi --dead)
    set_tests_properties(mpi.overlap mpi.overlap_dead PROPERTIES
      TIMEOUT 120 LABELS mpi ENVIRONMENT "${DTM_MPI_ENV}")
    set_tests_properties(mpi.overlap_dead PROPERTIES
      PASS_REGULAR_EXPRESSION "rank [013]: rank 2 failed: boom on purpose")
    #   mpi.auto_backend  `mpirun -np 4 ./NAME` without --backend: one rank
    #                     per process (the mpi backend is the default under a
    #                     launcher), the local backend's losses
    add_test(NAME mpi.auto_backend
             COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/mpi_auto.sh $<TARGET_FILE:dtmc> ${DTM_MPIRUN}
             WORKING_DIRECTORY ${DTM_ROOT})
    set_tests_properties(mpi.auto_backend PROPERTIES TIMEOUT 300 LABELS mpi)
    #   mpi.elastic  scripts/dtm-run: a rank of a 4-process run killed with
    #                SIGKILL at a random step; the run finishes on dp=2 with 2
    #                micro-batches from the last checkpoint (resharded), its
    #                losses a restart by hand's, bit for bit (issue 20)
    add_test(NAME mpi.elastic
             COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/elastic.sh $<TARGET_FILE:dtmc> ${DTM_MPIRUN}
             WORKING_DIRECTORY ${DTM_ROOT})
    set_tests_properties(mpi.elastic PROPERTIES TIMEOUT 300 LABELS mpi)
    #   mpi.calibrate  dtmc calibrate --backend mpi: the collectives and the
    #                multi-rank calibration runs under mpirun (issue 21)
    add_test(NAME mpi.calibrate
             COMMAND ${DTM_BASH} ${DTM_TESTS}/sweep/run.sh $<TARGET_FILE:dtmc> calibrate-mpi
             WORKING_DIRECTORY ${DTM_ROOT})
    set_tests_properties(mpi.calibrate PROPERTIES TIMEOUT 600 LABELS mpi RUN_SERIAL TRUE)
  else()
    add_test(NAME mpi.comm COMMAND ${CMAKE_COMMAND} -E echo
      "SKIP: mpirun not found (apt-get install openmpi-bin)")
    set_tests_properties(mpi.comm PROPERTIES LABELS mpi SKIP_REGULAR_EXPRESSION "SKIP")
  endif()
endif()
# ---- end mpi ----

# ---- jax: dtm against JAX/GSPMD under DP x TP (tests/jax, issue 4 point 7) ----
#   jax.NAME  train models/NAME.dtm 20 steps with dtm (single device, and on
#             dp=2,tp=2 once `dtmc build` accepts that mesh) and with JAX on 4
#             simulated CPU devices, placements from the .dtm annotations as
#             NamedShardings, from dtm's step-0 weights on dtm's batches: the
#             per-step losses must agree to 1e-4.  tests/jax/run.sh creates
#             the venv ~/.cache/dtm-bench/jax-venv (pip install jax[cpu], needs
#             PyPI) when missing; without JAX the test fails, never skips.
foreach(name mlp gpt)
  add_test(NAME jax.${name}
           COMMAND ${DTM_BASH} ${DTM_TESTS}/jax/run.sh $<TARGET_FILE:dtmc>
                   ${DTM_ROOT}/models/${name}.dtm --steps 20 --mesh dp=2,tp=2
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(jax.${name} PROPERTIES TIMEOUT 600 LABELS jax)
endforeach()
# ---- end jax ----

# ---- equiv: every layout trains like one device (issue 4 point 6) ----
#   e2e.equiv.NAME  build models/NAME.dtm for one device and for DDP (dp=4),
#                   TP (tp=2, tp=4), DP x TP (dp=2,tp=2), ZeRO-1/2/3 (dp=4;
#                   3 also without reshard_after_forward), HSDP (rep=2 x
#                   dp=2, zero 3) and FSDP x TP (dp=2,tp=2, zero 3), the
#                   ZeRO stages chosen with dtmc's --train, and uneven
#                   (torch.chunk) shards (mlp: hidden=6 over tp=4; gpt:
#                   vocab=250 over tp=4; llama: context parallelism, cp=2,
#                   cp=4, dp=2 x cp=2, cp=2 x tp=2, ring attention on
#                   pp=2 x cp=2 under 1f1b and ZB-H1; moe: expert parallelism,
#                   ep=2, 4, dp x ep, ep x tp, zero 3, pp x ep, skewed
#                   routing; each against a one-device build
#                   with the same -D); 10 steps with
#                   one seed: per-step losses and grad norms equal to 1e-5
#                   (and the held-out losses of --eval-every 5),
#                   and the final weights gathered from the per-rank
#                   checkpoints equal (tests/e2e/ckcompare.py), and every
#                   rank allocates the memory `dtmc inspect --json` reports
#                   for its stage and runs its communication (each kind's
#                   count and bytes; tests/e2e/inspect_alloc.py).  With the
#                   mpi backend built and mpirun found, a subset also runs
#                   under mpirun and must give the local backend's losses.
#                   Needs /usr/bin/python3 with numpy.
if(TARGET dtm_comm_mpi AND DTM_MPIRUN)
  set(DTM_EQUIV_MPIRUN ${DTM_MPIRUN})
else()
  set(DTM_EQUIV_MPIRUN none)
endif()
foreach(name mlp gpt llama moe)
  add_test(NAME e2e.equiv.${name}
           COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/equiv.sh $<TARGET_FILE:dtmc> ${name}
                   ${DTM_EQUIV_MPIRUN}
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(e2e.equiv.${name} PROPERTIES TIMEOUT 600 LABELS e2e)
endforeach()
#   e2e.pipeline.gpt  the same checks for pipelines (issue 5): GPipe, 1F1B
#                   and interleaved(2) on pp = 2 and 4, and pp=2 x dp=2 x
#                   tp=2 with FSDP and with DDP; two also under mpirun.
add_test(NAME e2e.pipeline.gpt
         COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/equiv.sh $<TARGET_FILE:dtmc> gpt
                 ${DTM_EQUIV_MPIRUN} pipeline
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(e2e.pipeline.gpt PROPERTIES TIMEOUT 600 LABELS e2e)
#   e2e.equiv.dropout, e2e.pipeline.dropout  tests/e2e/dropout.dtm, a small
#                   GPT with dropout (issue 14): M = 2 and 4 micro-batches on
#                   one device, DDP over 2 and 3, TP, DP x TP, SP, FSDP,
#                   recompute, and pipelines (GPipe, 1F1B, ZB-H1, with DP
#                   and TP) all draw the one-device masks: the same checks.
foreach(set equiv pipeline)
  add_test(NAME e2e.${set}.dropout
           COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/equiv.sh $<TARGET_FILE:dtmc> dropout
                   ${DTM_EQUIV_MPIRUN} $<$<STREQUAL:${set},pipeline>:pipeline>
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(e2e.${set}.dropout PROPERTIES TIMEOUT 600 LABELS e2e)
endforeach()
#   e2e.equiv.bf16.gpt  the same checks under `precision bf16` (issue 14):
#                   DP x TP (2x2), TP = 3 with sequence parallelism, ZeRO-3
#                   over dp = 3 and a 3-stage 1F1B pipeline against one
#                   device's bf16 run, with bf16's tolerances (equiv.sh).
add_test(NAME e2e.equiv.bf16.gpt
         COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/equiv.sh $<TARGET_FILE:dtmc> gpt
                 ${DTM_EQUIV_MPIRUN} bf16
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(e2e.equiv.bf16.gpt PROPERTIES TIMEOUT 600 LABELS e2e)
#   e2e.equiv.lm16  16-bit layouts whose roundings are one device's
#                   (tests/e2e/lm16.dtm: no split contraction): micro-batches,
#                   dp = 3, ZeRO, the vocab-parallel embedding, recompute and
#                   pipelines in bf16, recompute in f16, one step each against
#                   one device to f32's rounding (1e-6), not bf16's.
add_test(NAME e2e.equiv.lm16
         COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/equiv.sh $<TARGET_FILE:dtmc> lm16
                 ${DTM_EQUIV_MPIRUN}
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(e2e.equiv.lm16 PROPERTIES TIMEOUT 600 LABELS e2e)
#   e2e.equiv.cp.gpt  context parallelism (issue 17): a copy of GPT with the
#                   sequence split over a `cp` axis, attention as Ulysses,
#                   at cp = 2 and 4, dp2 x cp2, cp2 x tp2, pp2 x cp2 and
#                   FSDP x CP: the same checks.
add_test(NAME e2e.equiv.cp.gpt
         COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/equiv.sh $<TARGET_FILE:dtmc> gpt
                 ${DTM_EQUIV_MPIRUN} cp
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(e2e.equiv.cp.gpt PROPERTIES TIMEOUT 600 LABELS e2e)
#   e2e.moe_a2a  a mixture of experts' all_to_all bytes and expert load on a
#                batch whose routing is known (tests/e2e/moe_a2a.sh): inspect's
#                capacity bound, the runtime's load, drops and the bytes of
#                the sparse all_to_all (the routed rows only).
add_test(NAME e2e.moe_a2a
         COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/moe_a2a.sh $<TARGET_FILE:dtmc>
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(e2e.moe_a2a PROPERTIES TIMEOUT 300 LABELS e2e)
# ---- end equiv ----

# ---- inspect: `dtmc inspect` (tests/inspect/run.sh, issue 6) ----
#   inspect.golden       the text report of models/mlp.dtm on dp=2,tp=2 equals
#                        tests/inspect/mlp.dp2tp2.txt (run.sh --update golden)
#   inspect.labels       the tensor each collective, send and recv of
#                        models/gpt.dtm on pp=2,dp=2,tp=2, 4 micro-batches,
#                        sequence parallel, moves equals
#                        tests/inspect/gpt.pp2dp2tp2.m4.sp.txt (run.sh --update
#                        labels); no label is an SSA id, every micro-batch's
#                        match micro-batch 0's, no forward one is a gradient's
#   inspect.outputs      --json and --trace are JSON (Chrome trace events, a
#                        track per rank and stream), --dot renders with graphviz
#   inspect.conformance  models/gpt.dtm on dp=4, zero 0..3, bf16 (f32 and bf16
#                        reduce_dtype) and f32: params, grads, master weights and
#                        optimizer state per rank are REFERENCE.md's bytes per
#                        parameter times P
#   inspect.policy       the 12.85B GPT on dp=24, AdamW, zero 0..3, bf16 params with
#                        f32 / bf16 reduce_dtype, with / without a master: model
#                        state per rank equals the policy's bytes per param times P
#                        or the padded shards computed from the param shapes, exact
#   inspect.flops        GPT-2 small: FLOPs per token (6N + 6LCT) on dp=1, dp=8,
#                        tp=2, pp=2 all 803,261,952
#   inspect.errors       a bad model, --hw, --rank or --train: a message, exit 1
#   inspect.sync         a batch over (rep, dp) syncs gradients in buckets as
#                        one over dp (zero 1; sequence parallelism): counts
#   inspect.warnings     an uneven batch, sequence_parallel and recompute that
#                        change nothing: the exact warnings, from check,
#                        inspect and build; the models' layouts: none
#   inspect.dropout      tests/e2e/dropout.dtm on dp=3, DP x TP, SP, micro-batches
#                        and a pipeline: the communication (count and bytes per
#                        kind and axes, per stage) of the model without dropout
#   inspect.dot          --dot of gpt on pp=2,dp=2,tp=2, 4 micro-batches: renders,
#                        clusters per stage, micro-batch and block, a legend, global
#                        type @ placement apart from the local shard; --dot-scope
#                        layer.0 draws exactly block 0 plus stubs, in bounded size
# (inspect's peak against what the ranks allocate: e2e.equiv.*, e2e.pipeline.gpt)
foreach(mode golden labels outputs conformance policy errors flops dot sync warnings dropout)
  add_test(NAME inspect.${mode}
           COMMAND ${DTM_BASH} ${DTM_TESTS}/inspect/run.sh ${mode} $<TARGET_FILE:dtmc>
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(inspect.${mode} PROPERTIES TIMEOUT 120 LABELS inspect)
endforeach()

set_tests_properties(inspect.golden inspect.labels PROPERTIES LABELS "inspect;golden")
# ---- end inspect ----

# ---- e2e: checkpoints and the log under faults (tests/e2e/ckpt.sh, issue 13) ----
#   e2e.ckpt.mlp  dp=2,tp=2: a checkpoint is refused by a build with the mesh
#                 axes in another order or a placement moved (same shard
#                 shapes), with one message; --log /dev/full exits 1 (with
#                 --log-errors warn: 0, one warning); a save over a file size
#                 limit (ulimit -f) fails naming the file, leaves the previous
#                 checkpoint selected and resumable; a flipped byte in a rank
#                 file and edited index.json files are refused, naming them;
#                 --resume-fallback skips a damaged newest checkpoint (flipped
#                 byte, truncated file, bad header; resharded to dp=4, under
#                 ZeRO-3 seen by 2 of 4 ranks) on every rank for the previous
#                 one's exact losses; both damaged: exit 1
add_test(NAME e2e.ckpt.mlp
         COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/ckpt.sh $<TARGET_FILE:dtmc>
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(e2e.ckpt.mlp PROPERTIES TIMEOUT 300 LABELS e2e)
#   e2e.reshard   a checkpoint saved on dp2 x tp2, ZeRO-3 dp=4, pp2 x dp2 M=4 and
#                 bf16 HSDP resumes on three other layouts each (1 rank among
#                 them) with the uninterrupted run's losses (issue 20); also
#                 virtual stages, uneven ZeRO-3 shards, MoE's experts over ep
#                 and LLaMA on context parallelism (Ulysses, ring)
add_test(NAME e2e.reshard
         COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/reshard.sh $<TARGET_FILE:dtmc>
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(e2e.reshard PROPERTIES TIMEOUT 600 LABELS e2e)
#   e2e.ckpt_tools  dtmc ckpt info/merge/split with the Python safetensors
#                 package: merge -> Python -> split -> resume equals the
#                 resharded resume, bit for bit
add_test(NAME e2e.ckpt_tools
         COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/ckpt_tools.sh $<TARGET_FILE:dtmc>
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(e2e.ckpt_tools PROPERTIES TIMEOUT 300 LABELS e2e)
# ---- end ckpt ----

# ---- e2e: the communication thread (tests/e2e/overlap.sh, runtime/overlap.c) ----
#   e2e.overlap.gpt  dp=2,tp=2, pp=2,dp=2 (2 micro-batches), ZeRO-3 and DDP
#                    with a bucket per gradient: 5 steps with --overlap off,
#                    on, nocopy, and on with --comm-delay-us 300 give
#                    identical losses and grad norms (the same text), and the
#                    log has compute_s, comm_s, idle_s and feed_ms
add_test(NAME e2e.overlap.gpt
         COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/overlap.sh $<TARGET_FILE:dtmc>
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(e2e.overlap.gpt PROPERTIES TIMEOUT 300 LABELS e2e)
# ---- end overlap ----

# ---- e2e: the thread count (tests/e2e/threads.sh, issue 13 point 9) ----
#   e2e.threads  models/gpt.dtm on one device, dp=2,tp=2 and odd shapes in
#                bf16, models/mlp.dtm: 5 steps with --threads 1, 2, 3 and 4
#                give identical losses and grad norms (the same text) and
#                byte-identical final checkpoints; DTM_SGEMM=openblas and
#                onednn (the f32 GEMM library) losses within 1e-5
add_test(NAME e2e.threads
         COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/threads.sh $<TARGET_FILE:dtmc>
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(e2e.threads PROPERTIES TIMEOUT 300 LABELS e2e)
# ---- end threads ----

# ---- e2e: gradient accumulation (tests/e2e/accum.sh, passes/microbatch.c) ----
#   e2e.accum.NAME  microbatches 2 and 4, one device and DDP, give the M=1
#                   per-step losses and grad norms (1e-5)
foreach(name mlp gpt)
  add_test(NAME e2e.accum.${name}
           COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/accum.sh $<TARGET_FILE:dtmc> ${name}
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(e2e.accum.${name} PROPERTIES TIMEOUT 300 LABELS e2e)
endforeach()

# ---- cuda: the cuda device (runtime/dev_cuda.c, issue 7 points 3-4) ----
#   unit.test_cuda_host  also probes for a GPU through the cuda device:
#                        "no CUDA driver/device: ..." or a count
#   cuda.device.mlp      `--device cuda` on a dtmc-built binary: without a
#                        GPU exit 1 with "no CUDA driver/device"; with one,
#                        5 steps on CUDA equal the CPU's losses (1e-5)
# Built when CMake found the CUDA toolkit (the CUDA section of
# CMakeLists.txt); needs no GPU.
if(TARGET dtm_runtime_cuda)
  target_link_libraries(test_cuda_host PRIVATE dtm_runtime_cuda)
  target_compile_definitions(test_cuda_host PRIVATE DTM_TEST_CUDA)
  # rt.h declares the device weakly, which pulls nothing out of an archive
  target_link_options(test_cuda_host PRIVATE -Wl,-u,rt_cuda_probe)
  add_test(NAME cuda.device.mlp
           COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/cuda_device.sh $<TARGET_FILE:dtmc> mlp
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(cuda.device.mlp PROPERTIES TIMEOUT 300 LABELS cuda)

  #   cuda.mock.NAME  the cuda device's host code end to end without a GPU:
  #                   the generated program linked with tests/cuda_mock
  #                   (CUDA, cuBLAS, NVRTC and NCCL emulated on the CPU,
  #                   streams run in the worst order events allow) trains
  #                   the CPU's losses on one rank, DP x TP and ZeRO-3, with
  #                   --eval-every, --check-numerics, --save/--resume and the
  #                   cubin cache; --profile-actions and --calibrate-gemm on
  #                   the device (dtmc calibrate --device cuda's runtime
  #                   parts); and the no-GPU and too-few-GPU errors
  add_library(dtm_cuda_mock STATIC ${DTM_TESTS}/cuda_mock/cuda_mock.c)
  dtm_layer_includes(dtm_cuda_mock runtime)
  target_include_directories(dtm_cuda_mock SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  if(NCCL_LIB AND NCCL_INCLUDE)
    target_include_directories(dtm_cuda_mock SYSTEM PRIVATE ${NCCL_INCLUDE})
    target_compile_definitions(dtm_cuda_mock PRIVATE DTM_HAVE_NCCL)
  endif()
  foreach(name mlp gpt)
    add_test(NAME cuda.mock.${name}
             COMMAND ${DTM_BASH} ${DTM_TESTS}/e2e/cuda_mock.sh $<TARGET_FILE:dtmc> ${name}
                     $<TARGET_FILE:dtm_cuda_mock> $<TARGET_FILE:dtm_runtime_cuda>
                     $<TARGET_FILE:dtm_kernels> $<TARGET_FILE:dtm_runtime> $<TARGET_FILE:dtm_support> "${DTM_BLAS_LINK}|${DTM_DNNL_LINK}"
             WORKING_DIRECTORY ${DTM_ROOT})
    set_tests_properties(cuda.mock.${name} PROPERTIES TIMEOUT 600 LABELS cuda)
  endforeach()
endif()
# ---- end cuda ----

# ---- cuda kernels: codegen/emit_cuda.c's kernels without a GPU (issue 7 point 4) ----
#   cuda.nvrtc.NAME   `dtmc cuda-src` of models/NAME.dtm (and tests/cuda/ops.dtm,
#                     the ops the models leave out; llama_mask, llama_ring:
#                     the masked and ring attention kernels) on one device and on
#                     dp=2,tp=2, in f32 and bf16 (ops: f32, bf16, f16),
#                     compiled by NVRTC to PTX for sm_80 and sm_90: any
#                     error or warning fails (tests/cuda/nvrtc.sh; built when
#                     CMake found NVRTC)
#   cuda.kcheck.*     every CUDA kernel run on the host (tests/cuda/emu.cpp:
#                     each GPU thread a fiber, barriers and warp shuffles
#                     real) against the C kernel on the same random buffers:
#                     f32 within 2e-4, bf16/f16 within 2e-2
#                     (tests/cuda/kcheck.sh; needs a C++ compiler).  llama's
#                     cover attention with a window and segment ids (mask_),
#                     kv heads kept whole over tp (tp4_kv_whole: tp > kv_heads),
#                     Ulysses on ctx 31 over cp=2 (the padded rank: pad and
#                     trim around the all_to_alls) and ring attention's block ops, balanced (the default
#                     once T splits in 2 cp chunks) and not (ctx=30), on the
#                     ranks whose key blocks are above, on and below the
#                     diagonal, and on sequences cp does not divide (attn.seq:
#                     ctx=29 over cp=3 masked and balanced, 31 unbalanced,
#                     30 over cp=4 without the causal mask); moe's cover the routing ops on one device
#                     and on ep=2,tp=2 in bf16; gpt's dp4_uneven_batch_bf16 the
#                     loss's per-position ops on a batch of 6 over dp=4 (rank 3
#                     all padding)
file(GLOB DTM_CUDA_MODELS CONFIGURE_DEPENDS ${DTM_ROOT}/models/*.dtm)
if(TARGET nvrtc_check)
  foreach(model ${DTM_CUDA_MODELS})
    get_filename_component(name ${model} NAME_WE)
    # moe: one mesh, with ep and tp (its kernels are dp=1's, split)
    set(meshes "dp=1 dp=2,tp=2")
    if(name STREQUAL "moe")
      set(meshes "ep=2,tp=2")
    endif()
    add_test(NAME cuda.nvrtc.${name}
             COMMAND ${DTM_BASH} ${DTM_TESTS}/cuda/nvrtc.sh $<TARGET_FILE:dtmc>
                     $<TARGET_FILE:nvrtc_check> ${name} "${meshes}" "f32 bf16"
             WORKING_DIRECTORY ${DTM_ROOT})
    set_tests_properties(cuda.nvrtc.${name} PROPERTIES TIMEOUT 600 LABELS cuda)
  endforeach()
  # attention masked (window, segment ids) with kv heads kept whole over
  # tp (tp=4 > kv_heads), and ring attention's block ops (with a window):
  # one mesh each, as the NVRTC compile of a llama source takes a minute
  add_test(NAME cuda.nvrtc.llama_mask
           COMMAND ${DTM_BASH} ${DTM_TESTS}/cuda/nvrtc.sh $<TARGET_FILE:dtmc>
                   $<TARGET_FILE:nvrtc_check> llama:mask "tp=4" "f32 bf16"
           WORKING_DIRECTORY ${DTM_ROOT})
  add_test(NAME cuda.nvrtc.llama_ring
           COMMAND ${DTM_BASH} ${DTM_TESTS}/cuda/nvrtc.sh $<TARGET_FILE:dtmc>
                   $<TARGET_FILE:nvrtc_check> llama:mask
                   "cp=2,tp=2/context_parallel=ring" "f32 bf16"
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(cuda.nvrtc.llama_mask cuda.nvrtc.llama_ring PROPERTIES TIMEOUT 600
                       LABELS cuda)
  add_test(NAME cuda.nvrtc.ops
           COMMAND ${DTM_BASH} ${DTM_TESTS}/cuda/nvrtc.sh $<TARGET_FILE:dtmc>
                   $<TARGET_FILE:nvrtc_check> ${DTM_TESTS}/cuda/ops.dtm "dp=1 dp=2" "f32 bf16 f16"
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(cuda.nvrtc.ops PROPERTIES TIMEOUT 600 LABELS cuda)
else()
  add_test(NAME cuda.nvrtc.models COMMAND ${CMAKE_COMMAND} -E echo
    "SKIP: NVRTC not found (the CUDA toolkit), the NVRTC compile check is not built")
  set_tests_properties(cuda.nvrtc.models PROPERTIES LABELS cuda SKIP_REGULAR_EXPRESSION "SKIP")
endif()
include(CheckLanguage)
check_language(CXX)
if(CMAKE_CXX_COMPILER)
  set(DTM_KCHECK_CXX ${CMAKE_CXX_COMPILER})
else()
  find_program(DTM_KCHECK_CXX NAMES c++ g++ clang++)
endif()
if(DTM_KCHECK_CXX)
  # name, model (tests/cuda/model.sh: MODEL:mask, MODEL:window are masked
  # copies), dtmc options[, the ranks to check, default the last]
  set(DTM_KCHECKS
    "mlp.dp1|mlp|--mesh dp=1"
    "mlp.dp2tp2_bf16|mlp|--mesh dp=2,tp=2 --train precision=bf16"
    "gpt.dp1|gpt|--mesh dp=1"
    "gpt.dp2tp2_bf16|gpt|--mesh dp=2,tp=2 --train precision=bf16"
    "gpt.hd64_uneven|gpt|--mesh tp=2 -D vocab=255 -D d=128 -D heads=2 -D ctx=40 -D batch=2 -D layers=1"
    "gpt.zero1_f16|gpt|--mesh dp=2 --train zero=1 --train precision=f16"
    "gpt.dp4_uneven_batch_bf16|gpt|--mesh dp=4 -D batch=6 -D layers=1 --train precision=bf16|1 3"
    "llama.dp1|llama|--mesh dp=1"
    "llama.cp2tp2_bf16|llama|--mesh cp=2,tp=2 --train precision=bf16"
    "llama.mask_dp1|llama:mask|--mesh dp=1"
    "llama.mask_cp2tp2_bf16|llama:mask|--mesh cp=2,tp=2 --train precision=bf16"
    "llama.tp4_kv_whole|llama|--mesh tp=4"
    "llama.ulysses_kv_whole_cp2tp4|llama|--mesh cp=2,tp=4 -D heads=8 -D d=64 --train context_parallel=ulysses|2 4"
    "llama.ulysses_cp2_uneven|llama|--mesh cp=2 -D ctx=31 --train context_parallel=ulysses|1"
    "llama.ring_mask_cp2|llama:mask|--mesh cp=2 --train context_parallel=ring|0 1"
    "llama.ring_cp2_unbalanced|llama|--mesh cp=2 --train context_parallel=ring -D ctx=30|0 1"
    "llama.ring_cp2tp2_bf16|llama|--mesh cp=2,tp=2 --train context_parallel=ring --train precision=bf16"
    "llama.ring_cp3_uneven_mask|llama:mask|--mesh cp=3 --train context_parallel=ring -D ctx=29|0 1 2"
    "llama.ring_cp3_uneven_unbalanced|llama|--mesh cp=3 --train context_parallel=ring -D ctx=31|2"
    "llama.ring_cp4_uneven_bidir|llama:bidir|--mesh cp=4 --train context_parallel=ring -D ctx=30|0 3"
    "moe.dp1_ids_in_range|moe|--mesh dp=1 -D vocab=4"
    "moe.ep2tp2_bf16|moe|--mesh ep=2,tp=2 --train precision=bf16"
    "ops.f32|${DTM_TESTS}/cuda/ops.dtm|--mesh dp=1"
    "ops.bf16|${DTM_TESTS}/cuda/ops.dtm|--mesh dp=2 --train precision=bf16"
    "dropout.dp2tp2_m2|${DTM_TESTS}/e2e/dropout.dtm|--mesh dp=2,tp=2 --train microbatches=2")
  foreach(k ${DTM_KCHECKS})
    string(REPLACE "|" ";" kl "${k}")
    list(GET kl 0 kname)
    list(GET kl 1 kmodel)
    list(GET kl 2 kopts)
    set(kargs "")
    list(LENGTH kl kn)
    if(kn GREATER 3)
      list(GET kl 3 kargs)
    endif()
    separate_arguments(kopts UNIX_COMMAND "${kopts}")
    add_test(NAME cuda.kcheck.${kname}
             COMMAND ${CMAKE_COMMAND} -E env CC=${CMAKE_C_COMPILER} CXX=${DTM_KCHECK_CXX}
                     "KCHECK_RANKS=${kargs}" DTM_KERNELS_LIB=$<TARGET_FILE:dtm_kernels>
                     ${DTM_BASH} ${DTM_TESTS}/cuda/kcheck.sh $<TARGET_FILE:dtmc> ${kmodel} ${kopts}
             WORKING_DIRECTORY ${DTM_ROOT})
    set_tests_properties(cuda.kcheck.${kname} PROPERTIES TIMEOUT 600 LABELS cuda)
  endforeach()
endif()
# ---- end cuda kernels ----


# ---- sweep: `dtmc sweep` (issue 6 points 4-5; tests/sweep/run.sh) ----
#   sweep.json     models/mlp.dtm --devices 4 --json/--csv/--plot: structure,
#                  counts, factorizations, ranking order, an undominated front
#   sweep.errors   bad --devices, --hw, --mem-limit and options: exit 1, clear
#                  messages; a profile file; a limit that drops everything
#   sweep.cp       models/llama.dtm --devices 4: the context_parallel modes
#                  swept where cp > 1, shown, and costed as inspect does
#   sweep.moe      models/moe.dtm --devices 4: ep = 1, 2, 4 ranked, the best
#                  with ep > 1 costed as inspect does (its all_to_alls)
#   sweep.measure  --measure 2: build and run the best two on the local
#                  backend, predicted vs measured (runs on a clean clone)
#   sweep.calibrate  dtmc calibrate on a small budget, the profile it
#                  writes read by --hw and by sweep's default, and the
#                  fidelity check on 3 candidates (issue 21); --device cuda
#                  without a GPU says why and writes nothing (with one: a
#                  GPU profile)
add_test(NAME sweep.json COMMAND ${DTM_BASH} ${DTM_TESTS}/sweep/run.sh $<TARGET_FILE:dtmc> json
         WORKING_DIRECTORY ${DTM_ROOT})
add_test(NAME sweep.cp COMMAND ${DTM_BASH} ${DTM_TESTS}/sweep/run.sh $<TARGET_FILE:dtmc> cp
         WORKING_DIRECTORY ${DTM_ROOT})
add_test(NAME sweep.moe COMMAND ${DTM_BASH} ${DTM_TESTS}/sweep/run.sh $<TARGET_FILE:dtmc> moe
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(sweep.moe PROPERTIES TIMEOUT 120 LABELS golden)
add_test(NAME sweep.errors COMMAND ${DTM_BASH} ${DTM_TESTS}/sweep/run.sh $<TARGET_FILE:dtmc> errors
         WORKING_DIRECTORY ${DTM_ROOT})
add_test(NAME sweep.measure COMMAND ${DTM_BASH} ${DTM_TESTS}/sweep/run.sh $<TARGET_FILE:dtmc> measure
         WORKING_DIRECTORY ${DTM_ROOT})
add_test(NAME sweep.calibrate COMMAND ${DTM_BASH} ${DTM_TESTS}/sweep/run.sh $<TARGET_FILE:dtmc> calibrate
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(sweep.calibrate PROPERTIES TIMEOUT 600 LABELS e2e RUN_SERIAL TRUE)
set_tests_properties(sweep.json PROPERTIES TIMEOUT 120 LABELS golden)
set_tests_properties(sweep.cp PROPERTIES TIMEOUT 120 LABELS golden)
set_tests_properties(sweep.errors PROPERTIES TIMEOUT 120 LABELS diag)
set_tests_properties(sweep.measure PROPERTIES TIMEOUT 300 LABELS e2e)
#   sweep.published  bench/cost/published.sh (issue 21 point 4): inspect
#                  --hw a100 on the rows of Megatron-LM's SC'21 Table 1 that
#                  compile in seconds (1.7B to 145.6B; 310.1B takes 26 s and
#                  3 GB, 529.6B and 1T a dtmc with a bigger IR_MAX_NODES:
#                  bench/README.md) predicts each published TFLOP/s per GPU
#                  within 15%, with one efficiency set for every row
add_test(NAME sweep.published
         COMMAND ${DTM_BASH} ${DTM_ROOT}/bench/cost/published.sh $<TARGET_FILE:dtmc>
                 1.7B 3.6B 7.5B 18.4B 39.1B 76.1B 145.6B
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(sweep.published PROPERTIES TIMEOUT 300 LABELS inspect)
# ---- end sweep ----

# ---- mlir: dtmc export-mlir (issue 19; tests/mlir/run.sh) ----
#   mlir.export  every model and op corpus exports to a module MLIR verified,
#                mlir-opt prints back unchanged, with the params and inputs
#                as @forward's arguments and every placement a mesh.shard;
#                a rank's program after partition (every model; gpt under
#                pp=2, ranks 0 and 3, after partition and pipeline) with
#                the collectives of its stage as mesh ops or @dtm calls;
#                without MLIR, export-mlir names the packages to install
if(TARGET dtm_mlir AND DTM_MLIR_OPT)
  add_test(NAME mlir.export
           COMMAND ${DTM_BASH} ${DTM_TESTS}/mlir/run.sh $<TARGET_FILE:dtmc> ${DTM_MLIR_OPT}
           WORKING_DIRECTORY ${DTM_ROOT})
else()
  add_test(NAME mlir.export COMMAND ${DTM_BASH} ${DTM_TESTS}/mlir/run.sh $<TARGET_FILE:dtmc>
           WORKING_DIRECTORY ${DTM_ROOT})
endif()
set_tests_properties(mlir.export PROPERTIES TIMEOUT 300 LABELS golden)
#   mlir.train   a hand-written linalg + mesh MLIR model trains through dtm
#                with one device's losses under dp x tp (ZeRO-3, micro-batches,
#                bf16); an exported model trains as its .dtm; bad MLIR fails
#                at its file:line:col
if(TARGET dtm_mlir)
  add_test(NAME mlir.train
           COMMAND ${DTM_BASH} ${DTM_TESTS}/mlir/train.sh $<TARGET_FILE:dtmc>
           WORKING_DIRECTORY ${DTM_ROOT})
  set_tests_properties(mlir.train PROPERTIES TIMEOUT 600 LABELS e2e)
endif()
#   mlir.spmd    dtmc mlir-spmd: the collectives MLIR 19's sharding-propagation
#                and mesh-spmdization insert on the cut forward program of mlp
#                and gpt (three layouts each) are dtm's, but for the listed
#                differences, each with its reason (tests/mlir/spmd.sh)
if(TARGET dtm_mlir AND DTM_MLIR_OPT)
  add_test(NAME mlir.spmd
           COMMAND ${DTM_BASH} ${DTM_TESTS}/mlir/spmd.sh $<TARGET_FILE:dtmc> ${DTM_MLIR_OPT}
           WORKING_DIRECTORY ${DTM_ROOT})
else()
  add_test(NAME mlir.spmd COMMAND ${DTM_BASH} ${DTM_TESTS}/mlir/spmd.sh $<TARGET_FILE:dtmc>
           WORKING_DIRECTORY ${DTM_ROOT})
endif()
set_tests_properties(mlir.spmd PROPERTIES TIMEOUT 120 LABELS golden)
# ---- end mlir ----

# ---- build: the build without optional dependencies (issue 12 point 1) ----
#   build.minimal  OpenBLAS, MPI and CUDA turned off, -Werror, every target;
#                  the plain-loop GEMM trains mlp dp=2 to OpenBLAS's losses
add_test(NAME build.minimal
         COMMAND ${DTM_BASH} ${DTM_TESTS}/build/minimal.sh $<TARGET_FILE:dtmc>
                 ${CMAKE_CURRENT_BINARY_DIR}/minimal
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(build.minimal PROPERTIES TIMEOUT 600 LABELS build)

# ---- layers: every include one its layer may make (issue 15 point 4) ----
#   layers.includes  scripts/check-layers: the layer table (in the script)
#                    against every quoted include of every layer's files;
#                    no "../" include anywhere (docs/ARCHITECTURE.md, "Layers")
add_test(NAME layers.includes
         COMMAND ${DTM_BASH} ${DTM_ROOT}/scripts/check-layers ${DTM_ROOT}
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(layers.includes PROPERTIES TIMEOUT 60 LABELS layers)

# ---- docs: README.md against the program (issue 12 point 5) ----
add_test(NAME docs.readme
         COMMAND ${DTM_BASH} ${DTM_TESTS}/docs/readme.sh $<TARGET_FILE:dtmc>
         WORKING_DIRECTORY ${DTM_ROOT})
set_tests_properties(docs.readme PROPERTIES TIMEOUT 60 LABELS diag)
