# Server tests (owner: serving). Included by tests/CMakeLists.txt.
jagrank_add_test(NAME server_config_test SOURCES server_config_test.cc LIBS jagrank_server TIMEOUT 60)
jagrank_add_test(NAME server_rank_request_test SOURCES server_rank_request_test.cc LIBS jagrank_server TIMEOUT 60)
jagrank_add_test(NAME server_batcher_test SOURCES server_batcher_test.cc LIBS jagrank_server TIMEOUT 60)
jagrank_add_test(NAME server_grpc_test SOURCES server_grpc_test.cc
                 LIBS jagrank_server jagrank_health_proto TIMEOUT 120)
target_include_directories(server_grpc_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
jagrank_add_test(NAME server_stream_test SOURCES server_stream_test.cc LIBS jagrank_server TIMEOUT 120)
target_include_directories(server_stream_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
# Spawns the real binaries (server, client, loadgen).
jagrank_add_test(NAME server_process_test SOURCES server_process_test.cc
                 LIBS jagrank_server jagrank_health_proto nlohmann_json::nlohmann_json TIMEOUT 120)
target_include_directories(server_process_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_definitions(server_process_test PRIVATE
  JAGRANK_SERVER_BINARY="$<TARGET_FILE:jagrank-server>"
  JAGRANK_CLIENT_BINARY="$<TARGET_FILE:jagrank-client>"
  JAGRANK_LOADGEN_BINARY="$<TARGET_FILE:jagrank-loadgen>"
  $<$<BOOL:${JAGRANK_WITH_TCMALLOC}>:JAGRANK_EXPECT_TCMALLOC=1>
  $<$<BOOL:${JAGRANK_SANITIZER}>:JAGRANK_EXPECT_SANITIZER_MALLOC=1>)
add_dependencies(server_process_test jagrank-server jagrank-client jagrank-loadgen)
# Model repository and hot reload: real files, real gRPC over loopback.
jagrank_add_test(NAME server_reload_test SOURCES server_reload_test.cc
                 LIBS jagrank_server jagrank_health_proto TIMEOUT 180)
target_include_directories(server_reload_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
# Several executors on one batcher (CPU).
jagrank_add_test(NAME server_executors_test SOURCES server_executors_test.cc LIBS jagrank_server TIMEOUT 120)
target_include_directories(server_executors_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
# The overload case measures throughput (capacity, then goodput at 3x): it runs
# alone, not beside whatever else ctest -j runs at the time.
set_tests_properties(server_process_test PROPERTIES ENVIRONMENT "GTEST_FILTER=-*Overload*")
add_test(NAME server_overload_test COMMAND server_process_test --gtest_filter=*Overload*
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(server_overload_test PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE)
# Hostile connections against the in-process server (memory quota).
jagrank_add_test(NAME server_hostile_test SOURCES server_hostile_test.cc LIBS jagrank_server TIMEOUT 120)
target_include_directories(server_hostile_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(server_hostile_test PROPERTIES RUN_SERIAL TRUE)  # times a probe call under attack
