# The two-host mode (ci/two_host.sh, `shardbench run --hosts netns`): two network-namespace hosts
# joined by a veth pair, the link's byte counters checked against the ledger. Needs root and
# iproute2/util-linux/ethtool; elsewhere the test exits 77 and ctest reports it skipped.
# Included by the top-level CMakeLists.txt; RUN_SERIAL: the counters and timings want the CPUs.
if(TARGET shardbench)
  add_test(NAME two_host COMMAND bash ${CMAKE_SOURCE_DIR}/tests/two_host_test.sh
                                 $<TARGET_FILE:shardbench>)
  set_tests_properties(two_host PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120 RUN_SERIAL TRUE
                       ENVIRONMENT "${SB_TEST_ENV}" LABELS "mpi;netns")
endif()
# The shaped link (--inter-gbps/--inter-latency-ms, tests/network_test.sh): refusals are cheap
# (no MPI job), the prediction's inter link from a hand-written file too (two 2-rank jobs of
# tiny, no namespaces); the shaped runs, the duplex exchange, the accumulation ratios and the
# killed rank start real jobs: labelled nightly.
if(TARGET shardbench)
  foreach(mode refusal shaped killed duplex accumulation prediction)
    add_test(NAME network_${mode} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/network_test.sh
                                          $<TARGET_FILE:shardbench> ${mode})
    set_tests_properties(network_${mode} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 180
                         RUN_SERIAL TRUE ENVIRONMENT "${SB_TEST_ENV}" LABELS "mpi;netns")
  endforeach()
  set_tests_properties(network_shaped network_killed network_duplex network_accumulation PROPERTIES LABELS "mpi;netns;nightly")
endif()
