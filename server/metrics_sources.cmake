# Sources of the Prometheus metrics implementation and the status page,
# included by server/CMakeLists.txt after the jagrank_server target exists.
# Owner: metrics/deploy.
