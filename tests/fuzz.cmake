# Fuzzing (owner: sanitizers and fuzzing). The libFuzzer targets of fuzz/
# build with clang in their own directory (<build>-fuzz) through fuzz/run.sh,
# never as part of this build; fuzz_build is the fixture that builds them.
# Each fuzz_<name>_test replays the kept crash inputs of
# fuzz/regressions/<name>/ and fuzzes 10 s from the seed corpus. Not in
# sanitizer builds (the fuzz build is one).
if(NOT JAGRANK_SANITIZER)
  add_test(NAME fuzz_build COMMAND ${PROJECT_SOURCE_DIR}/fuzz/run.sh build ${CMAKE_BINARY_DIR}-fuzz
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(fuzz_build PROPERTIES FIXTURES_SETUP jagrank_fuzzers LABELS fuzz TIMEOUT 1800)
  foreach(name rank_request safetensors model_config server_config)
    add_test(NAME fuzz_${name}_test COMMAND ${PROJECT_SOURCE_DIR}/fuzz/run.sh run ${CMAKE_BINARY_DIR}-fuzz 10 ${name}
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(fuzz_${name}_test PROPERTIES FIXTURES_REQUIRED jagrank_fuzzers LABELS fuzz TIMEOUT 300)
  endforeach()
endif()
