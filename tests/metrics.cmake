# Metrics, status page and deployment tests (owner: metrics/deploy).
# Included from tests/CMakeLists.txt.

# The metrics implementation: from jagrank_server once it carries it
# (server/metrics_sources.cmake), compiled into the test otherwise.
function(jagrank_metrics_test name)
  jagrank_add_test(NAME ${name} SOURCES ${ARGN} LIBS nlohmann_json::nlohmann_json ZLIB::ZLIB TIMEOUT 120)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  if(TARGET jagrank_server)
    target_link_libraries(${name} PRIVATE jagrank_server)
  else()
    jagrank_add_metrics_sources(${name})
  endif()
endfunction()

if(NOT COMMAND jagrank_add_metrics_sources)
  include(${PROJECT_SOURCE_DIR}/server/metrics_sources.cmake)
endif()

jagrank_metrics_test(metrics_prometheus_test metrics_prometheus_test.cc)
jagrank_metrics_test(metrics_deploy_test metrics_deploy_test.cc)
target_link_libraries(metrics_deploy_test PRIVATE yaml-cpp)
# The Kubernetes args are run through the real server (--check-config), with
# a model repository the exporter writes.
if(TARGET jagrank-server AND TARGET jagrank-export-model)
  add_dependencies(metrics_deploy_test jagrank-server jagrank-export-model)
  set_tests_properties(metrics_deploy_test PROPERTIES ENVIRONMENT
    "JAGRANK_SERVER=$<TARGET_FILE:jagrank-server>;JAGRANK_EXPORT_MODEL=$<TARGET_FILE:jagrank-export-model>")
endif()

# End to end against the real binaries, Prometheus and Chromium: only once the
# server and its health client exist.
if(TARGET jagrank-server AND TARGET jagrank_health_proto)
  jagrank_add_test(NAME metrics_server_test SOURCES metrics_server_test.cc
                   LIBS jagrank_proto jagrank_health_proto nlohmann_json::nlohmann_json ZLIB::ZLIB
                   TIMEOUT 240)
  target_include_directories(metrics_server_test PRIVATE ${PROJECT_SOURCE_DIR})
  add_dependencies(metrics_server_test jagrank-server)
  set(_jagrank_metrics_env "JAGRANK_SERVER=$<TARGET_FILE:jagrank-server>")
  if(TARGET jagrank-client)
    add_dependencies(metrics_server_test jagrank-client)
    list(APPEND _jagrank_metrics_env "JAGRANK_CLIENT=$<TARGET_FILE:jagrank-client>")
  endif()
  set_tests_properties(metrics_server_test PROPERTIES ENVIRONMENT "${_jagrank_metrics_env}")
endif()

# The container image: the Dockerfile's CPU variant built on a local Debian 12
# base with podman and run (tests/deploy_image_test.sh; `make image-test`).
# Alone on the machine: it compiles the project inside the image build.
if(TARGET jagrank-server AND TARGET jagrank-client AND TARGET jagrank-export-model)
  add_test(NAME deploy_image_test
           COMMAND ${PROJECT_SOURCE_DIR}/tests/deploy_image_test.sh
                   --bin-dir $<TARGET_FILE_DIR:jagrank-server> --podman-dir ${CMAKE_BINARY_DIR}/podman
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(deploy_image_test PROPERTIES RUN_SERIAL TRUE TIMEOUT 900 LABELS image)
endif()
