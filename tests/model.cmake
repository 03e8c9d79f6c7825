# Model tests (owner: model). Included by tests/CMakeLists.txt.
jagrank_add_test(NAME model_config_test SOURCES model_config_test.cc LIBS jagrank_model TIMEOUT 60)
jagrank_add_test(NAME model_weights_test SOURCES model_weights_test.cc LIBS jagrank_model TIMEOUT 60)
jagrank_add_test(NAME model_forward_test SOURCES model_forward_test.cc LIBS jagrank_model TIMEOUT 120)
jagrank_add_test(NAME model_cuda_test SOURCES model_cuda_test.cc LIBS jagrank_model LABELS gpu TIMEOUT 300)
# The weights test also drives the export command.
add_dependencies(model_weights_test jagrank-export-model)
target_compile_definitions(model_weights_test PRIVATE JAGRANK_EXPORT_BIN="$<TARGET_FILE:jagrank-export-model>")
