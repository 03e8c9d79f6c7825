# Sources of the Prometheus metrics implementation and the status page,
# included by server/CMakeLists.txt after the jagrank_server target exists.
# Owner: metrics/deploy.
#
# server/status_page.html is embedded as a C++ raw string in a generated
# header (<build>/generated/server/status_page_html.h); editing the page
# re-runs CMake and rebuilds prometheus_metrics.cc.

set(JAGRANK_STATUS_PAGE_HTML ${CMAKE_CURRENT_LIST_DIR}/status_page.html)
set(JAGRANK_METRICS_GENERATED_DIR ${PROJECT_BINARY_DIR}/generated)

set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${JAGRANK_STATUS_PAGE_HTML})
file(READ ${JAGRANK_STATUS_PAGE_HTML} _jagrank_status_page)
string(FIND "${_jagrank_status_page}" ")jagrank_html\"" _jagrank_delim_pos)
if(NOT _jagrank_delim_pos EQUAL -1)
  message(FATAL_ERROR "status_page.html must not contain the raw-string delimiter )jagrank_html\"")
endif()
# configure_file(COPYONLY) rewrites the header only when it changed.
file(WRITE ${JAGRANK_METRICS_GENERATED_DIR}/status_page_html.h.tmp
  "// Generated from server/status_page.html by server/metrics_sources.cmake. Do not edit.\n"
  "#ifndef JAGRANK_SERVER_STATUS_PAGE_HTML_H_\n"
  "#define JAGRANK_SERVER_STATUS_PAGE_HTML_H_\n"
  "namespace jagrank {\n"
  "inline constexpr char kStatusPageHtml[] = R\"jagrank_html(${_jagrank_status_page})jagrank_html\";\n"
  "}  // namespace jagrank\n"
  "#endif  // JAGRANK_SERVER_STATUS_PAGE_HTML_H_\n")
configure_file(${JAGRANK_METRICS_GENERATED_DIR}/status_page_html.h.tmp
  ${JAGRANK_METRICS_GENERATED_DIR}/server/status_page_html.h COPYONLY)
unset(_jagrank_status_page)
unset(_jagrank_delim_pos)

# Adds the metrics sources to `target` (jagrank_server, or a test binary while
# the server library does not exist yet).
# Uses no directory-scoped variables, so any folder may call it.
function(jagrank_add_metrics_sources target)
  target_sources(${target} PRIVATE ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/prometheus_metrics.cc)
  target_include_directories(${target} PRIVATE ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(${target} PRIVATE prometheus-cpp::pull prometheus-cpp::core
                                          civetweb::civetweb-cpp civetweb::civetweb)
endfunction()

if(TARGET jagrank_server)
  jagrank_add_metrics_sources(jagrank_server)
endif()
