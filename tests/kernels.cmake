# CPU kernel tests (owner: kernels CPU). Each is a plain-loop / double
# reference check on random jagged batches plus bad-argument cases.
jagrank_add_test(NAME kernels_embedding_test SOURCES kernels_embedding_test.cc LIBS jagrank_kernels TIMEOUT 120)
jagrank_add_test(NAME kernels_attention_test SOURCES kernels_attention_test.cc LIBS jagrank_kernels TIMEOUT 120)
jagrank_add_test(NAME kernels_interaction_test SOURCES kernels_interaction_test.cc LIBS jagrank_kernels TIMEOUT 120)
jagrank_add_test(NAME kernels_linear_test SOURCES kernels_linear_test.cc LIBS jagrank_kernels TIMEOUT 120)
jagrank_add_test(NAME kernels_padded_test SOURCES kernels_padded_test.cc LIBS jagrank_kernels TIMEOUT 120)
jagrank_add_test(NAME kernels_flash_tile_test SOURCES kernels_flash_tile_test.cc LIBS jagrank_kernels TIMEOUT 60)
jagrank_add_test(NAME kernels_jagged_test SOURCES kernels_jagged_test.cc LIBS jagrank_kernels TIMEOUT 60)
jagrank_add_test(NAME kernels_thread_pool_test SOURCES kernels_thread_pool_test.cc LIBS jagrank_kernels TIMEOUT 60)
