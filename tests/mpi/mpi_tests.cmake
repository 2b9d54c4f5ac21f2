# Multi-rank ctest entries: each multi-rank binary under mpirun for several world sizes (np) and
# virtual-node shapes (--rpn=G consecutive ranks per node, only where G divides np). Included by
# the top-level CMakeLists.txt after the binaries are defined; it builds nothing itself.
# yield_when_idle: oversubscribed ranks otherwise busy-poll and starve each other on few cores.
set(SB_MPI_TEST_ENV ${SB_TEST_ENV} OMPI_MCA_mpi_yield_when_idle=1)

# sb_add_mpi_tests(<target> <name prefix> <np:rpn>...) adds one entry per shape, e.g. 4:2.
function(sb_add_mpi_tests target prefix)
  foreach(shape IN LISTS ARGN)
    string(REPLACE ":" ";" parts ${shape})
    list(GET parts 0 np)
    list(GET parts 1 rpn)
    set(name ${prefix}_np${np}_rpn${rpn})
    add_test(NAME ${name} COMMAND ${SB_MPIRUN} -np ${np} $<TARGET_FILE:${target}> --rpn=${rpn})
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${SB_MPI_TEST_ENV}" TIMEOUT 300
                         PROCESSORS ${np} LABELS "mpi")
  endforeach()
endfunction()

if(TARGET sb_mpi_comm_tests)
  sb_add_mpi_tests(sb_mpi_comm_tests mpi_comm 1:1 2:1 2:2 3:1 3:3 4:1 4:2 4:4)
endif()

if(TARGET sb_mpi_run_tests)
  sb_add_mpi_tests(sb_mpi_run_tests mpi_run 1:1 2:1 2:2 4:1 4:2)
endif()

# The predictor's dry run against the real job, at every world 1..4 (3: padding everywhere).
if(TARGET sb_mpi_predict_tests)
  sb_add_mpi_tests(sb_mpi_predict_tests mpi_predict 1:1 2:1 2:2 3:1 3:3 4:1 4:2 4:4)
endif()
