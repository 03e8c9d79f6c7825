# Python tests (label `python`): the PyTorch twin (python/jagrank) against the
# real jagrank-server on the CPU backend over a unix socket, the export
# command, weight files and the gRPC client. Included by tests/CMakeLists.txt.
# bench/model_vs_torch.py in its quick CPU mode (a tiny model): its fast twin
# (stacked tables, one embedding_bag, fused QKV, varlen attention API, gather +
# bmm interaction) must compute the twin's function; exit 1 on a mismatch.
if(JAGRANK_PYTHON)
  add_test(NAME python_model_vs_torch_quick_test
           COMMAND ${JAGRANK_PYTHON} ${PROJECT_SOURCE_DIR}/bench/model_vs_torch.py --device cpu --parts twin --quick
                   --compile-modes "" --duration-s 0.2
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(python_model_vs_torch_quick_test PROPERTIES
    LABELS python
    TIMEOUT 120
    ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
  # Its jagrank parts on the tiny model: jagrank-bench-model pipelined, and
  # the real server and load generator (startup, the ramp, the /metrics
  # scrapes, the CPU accounting); exit 1 when a part fails. Only where those
  # binaries are built (JAGRANK_BUILD_BENCH; the TSan build leaves them out).
endif()
if(JAGRANK_PYTHON AND JAGRANK_BUILD_BENCH)
  add_test(NAME python_model_vs_torch_jagrank_quick_test
           COMMAND ${JAGRANK_PYTHON} ${PROJECT_SOURCE_DIR}/bench/model_vs_torch.py --device cpu --parts inprocess,served
                   --quick --bench-binary $<TARGET_FILE:jagrank-bench-model>
                   --server-binary $<TARGET_FILE:jagrank-server> --loadgen-binary $<TARGET_FILE:jagrank-loadgen>
                   --served-variants "jagged=||4" --loadgen-duration-s 1 --p99-ms 1000
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(python_model_vs_torch_jagrank_quick_test PROPERTIES
    LABELS python
    TIMEOUT 120
    ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
endif()
# bench/attention_vs_torch.py without torch or a GPU: --dry-run's shape sets,
# lengths and planned time (<= 3 min), the length laws, and the summary lines
# --from-json prints (tests/bench_attention_vs_torch_test.py).
if(JAGRANK_PYTHON)
  add_test(NAME python_attention_vs_torch_dry_run_test
           COMMAND ${JAGRANK_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/bench_attention_vs_torch_test.py -v
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(python_attention_vs_torch_dry_run_test PROPERTIES
    LABELS python
    TIMEOUT 120
    ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
endif()
if(NOT JAGRANK_PYTHON_STUBS)
  return()  # python/CMakeLists.txt warned: no grpc_tools, no stubs
endif()
foreach(_name twin_vs_server server_to_twin weights_files train_round_trip client)
  add_test(NAME python_${_name}_test
           COMMAND ${JAGRANK_PYTHON} -m unittest -v test_${_name}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/python/tests)
  set_tests_properties(python_${_name}_test PROPERTIES
    LABELS python
    TIMEOUT 300
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python:${CMAKE_BINARY_DIR}/python;PYTHONDONTWRITEBYTECODE=1;JAGRANK_SERVER_BINARY=$<TARGET_FILE:jagrank-server>;JAGRANK_EXPORT_BINARY=$<TARGET_FILE:jagrank-export-model>;OMP_NUM_THREADS=1")
endforeach()
# The twin on CUDA against the server's CUDA backend (python/tests/twin_vs_server_cuda.py);
# exits 77 = skipped without a CUDA device. Max error bound: a gross-mismatch check only,
# the measured figures per precision come from running the script itself.
add_test(NAME python_twin_vs_server_cuda_test
         COMMAND ${JAGRANK_PYTHON} ${PROJECT_SOURCE_DIR}/python/tests/twin_vs_server_cuda.py --max-error 5e-2
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python_twin_vs_server_cuda_test PROPERTIES
  LABELS "python;gpu"
  TIMEOUT 600
  SKIP_RETURN_CODE 77
  ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python:${CMAKE_BINARY_DIR}/python;PYTHONDONTWRITEBYTECODE=1;JAGRANK_SERVER_BINARY=$<TARGET_FILE:jagrank-server>")
