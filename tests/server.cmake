# Server tests (owner: serving). Included by tests/CMakeLists.txt.
jagrank_add_test(NAME server_config_test SOURCES server_config_test.cc LIBS jagrank_server TIMEOUT 60)
jagrank_add_test(NAME server_batcher_test SOURCES server_batcher_test.cc LIBS jagrank_server TIMEOUT 60)
jagrank_add_test(NAME server_grpc_test SOURCES server_grpc_test.cc
                 LIBS jagrank_server jagrank_health_proto TIMEOUT 120)
target_include_directories(server_grpc_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
