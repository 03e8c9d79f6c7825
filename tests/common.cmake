# Tests of the base layer (common/). Included by tests/CMakeLists.txt.
jagrank_add_test(NAME common_process_test SOURCES common_process_test.cc LIBS jagrank_common TIMEOUT 60)
jagrank_add_test(NAME common_socket_address_test SOURCES common_socket_address_test.cc LIBS jagrank_common TIMEOUT 60)
