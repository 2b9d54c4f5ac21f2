# Multi-rank ctest entries: each multi-rank binary under mpirun for several world sizes (np) and
# virtual-node shapes (--rpn=G consecutive ranks per node, only where G divides np). Included by
# the top-level CMakeLists.txt after the binaries are defined; it builds nothing itself.
# yield_when_idle: oversubscribed ranks otherwise busy-poll and starve each other on few cores.
set(SB_MPI_TEST_ENV ${SB_TEST_ENV} OMPI_MCA_mpi_yield_when_idle=1)

# sb_add_mpi_tests(<target> <name prefix> <np:rpn>... [SANITIZE <np:rpn>] [ARGS ...]) adds one
# entry per shape, e.g. 4:2; extra arguments for the binary go after ARGS (e.g. --model=SPEC).
# SANITIZE names the one shape of the call that also runs under ASan/UBSan on every change
# (label "sanitize", ci/sanitize.sh); every shape runs under them in the nightly.
function(sb_add_mpi_tests target prefix)
  cmake_parse_arguments(PARSE_ARGV 2 opt "" "SANITIZE" "ARGS")
  foreach(shape IN LISTS opt_UNPARSED_ARGUMENTS)
    string(REPLACE ":" ";" parts ${shape})
    list(GET parts 0 np)
    list(GET parts 1 rpn)
    set(name ${prefix}_np${np}_rpn${rpn})
    add_test(NAME ${name} COMMAND ${SB_MPIRUN} -np ${np} $<TARGET_FILE:${target}> --rpn=${rpn}
                                  ${opt_ARGS})
    set(labels "mpi")
    if(shape STREQUAL opt_SANITIZE)
      list(APPEND labels "sanitize")
    endif()
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${SB_MPI_TEST_ENV}" TIMEOUT 300
                         PROCESSORS ${np} LABELS "${labels}")
  endforeach()
endfunction()

# A missing binary is an error, not a silently smaller suite.
foreach(target sb_mpi_comm_tests sb_mpi_run_tests sb_mpi_predict_tests)
  if(NOT TARGET ${target})
    message(FATAL_ERROR "multi-rank test binary ${target} has no sources (tests/mpi/)")
  endif()
endforeach()

# Under ASan on every change: every collective (ring and native, all-to-all included) at 4:2,
# where world, node and cross-node groups all have two or more ranks.
sb_add_mpi_tests(sb_mpi_comm_tests mpi_comm 1:1 2:1 2:2 3:1 3:3 4:1 4:2 4:4 SANITIZE 4:2)
sb_add_mpi_tests(sb_mpi_run_tests mpi_run 1:1 2:1 2:2 4:1 4:2)
# Padding: `tiny`'s tensors all divide 1, 2 and 4. The odd shape (L=2, C=25, H=5, T=16, V=59:
# 17,575 parameters) has a total, FSDP units (root 1,925, blocks 7,825), token embedding (1,475),
# LayerNorms and projection biases (25) that divide by neither 2 nor 3, so at a world of 3 every
# flat buffer, bucket, unit and most tensor shards are padded and every ring has uneven chunks.
sb_add_mpi_tests(sb_mpi_run_tests mpi_run_odd 3:1 3:3 ARGS --model=2,25,5,16,59)
# Under ASan on every change: the suites instantiated over the registry (AllStrategies/: parity,
# bytes, model state of every strategy, so of every family) on the odd shape at 3:1, where every
# buffer is padded and every ring chunk uneven. The nightly runs all of mpi_run_odd under ASan.
if(SB_SANITIZE)
  sb_add_mpi_tests(sb_mpi_run_tests mpi_run_strategies 3:1 SANITIZE 3:1
                   ARGS --model=2,25,5,16,59 --gtest_filter=AllStrategies/*)
endif()
# The Llama block (--arch llama): parity of every strategy against the 1-rank run, closed-form
# bytes and memory, on llama-tiny (GQA 4 heads on 2) and at a world of 3 on llama-tiny-pad,
# whose total, units and tensors divide by neither 2 nor 3.
sb_add_mpi_tests(sb_mpi_run_tests mpi_run_llama 2:1 4:2 ARGS --model=llama-tiny)
sb_add_mpi_tests(sb_mpi_run_tests mpi_run_llama_pad 3:1 ARGS --model=llama-tiny-pad)
# MiCS with partitions other than the node (the runs above use the default, P = G): spanning two
# nodes (hierarchical all-gather possible, 4:1 with replicas, 4:2 without), and splitting one
# node in two (replicas inside it); the odd shape at a world of 3 as one partition over 3 nodes.
sb_add_mpi_tests(sb_mpi_run_tests mpi_run_mics_p2 4:1 4:4 ARGS --partition=2 --gtest_filter=*mics*:ParityKnobs.*)
sb_add_mpi_tests(sb_mpi_run_tests mpi_run_mics_p4 4:2 ARGS --partition=4 --gtest_filter=*mics*:ParityKnobs.*)
sb_add_mpi_tests(sb_mpi_run_tests mpi_run_odd_mics_p3 3:1 ARGS --partition=3 --model=2,25,5,16,59 --gtest_filter=*mics*:ParityKnobs.*)

# Steady state (run_page_faults_test.cc) on buffers of a few MiB, above glibc's default mmap
# threshold, where a block that left the cache would be mapped and faulted every step.
sb_add_mpi_tests(sb_mpi_run_tests mpi_run_steady 2:2 ARGS --model=2,128,4,64,4096 --gtest_filter=*SteadyState*)
# ZeRO++ across two nodes (qgZ runs only there), with a 36 MiB token embedding: past glibc's
# largest mmap threshold (32 MiB), so a host vector of its size is mapped anew on every malloc.
sb_add_mpi_tests(sb_mpi_run_tests mpi_run_steady_zeropp 2:1 ARGS --model=2,128,4,64,73728 --gtest_filter=ZeroPPSteadyState.*)

# The predictor's dry run against the real job, at every world 1..4 (3: padding everywhere).
sb_add_mpi_tests(sb_mpi_predict_tests mpi_predict 1:1 2:1 2:2 3:1 3:3 4:1 4:2 4:4)
sb_add_mpi_tests(sb_mpi_predict_tests mpi_predict_mics_p2 4:1 4:4 ARGS --partition=2 --gtest_filter=*mics*)
sb_add_mpi_tests(sb_mpi_predict_tests mpi_predict_mics_p4 4:2 ARGS --partition=4 --gtest_filter=*mics*)
