#!/bin/sh
# The image's HEALTHCHECK: asks the gRPC health service of the running
# jagrank-server at the address it was started with, so that a container run
# with `--grpc-address 0.0.0.0:9000` (or a --config file that moves the port)
# is checked where it listens. The address is, as the server resolves it:
# the last --grpc-address flag, else grpc_address in the last --config file,
# else the built-in default (port 8500). A wildcard host is asked on loopback.
# Exit 0 only when the server reports SERVING.
set -eu

server_pid() {
  for comm in /proc/[0-9]*/comm; do
    if [ "$(cat "$comm" 2>/dev/null)" = "jagrank-server" ]; then
      pid=${comm#/proc/}
      echo "${pid%/comm}"
      return 0
    fi
  done
  return 1
}

pid=$(server_pid) || { echo "jagrank-healthcheck: no jagrank-server process" >&2; exit 1; }

address=""
config=""
want=""
# /proc/PID/cmdline is NUL-separated: one argument a line.
while IFS= read -r arg; do
  case "$want" in
    address) address=$arg; want=""; continue ;;
    config) config=$arg; want=""; continue ;;
  esac
  case "$arg" in
    --grpc-address=*) address=${arg#--grpc-address=} ;;
    --grpc-address) want=address ;;
    --config=*) config=${arg#--config=} ;;
    --config) want=config ;;
  esac
done <<EOF
$(tr '\0' '\n' < "/proc/$pid/cmdline")
EOF

if [ -z "$address" ] && [ -n "$config" ] && [ -r "$config" ]; then
  # A top-level `grpc_address: value  # comment` line; quotes dropped.
  address=$(sed -n 's/^grpc_address:[[:space:]]*\([^#[:space:]]*\).*/\1/p' "$config" | tail -n1 | tr -d "\"'")
fi
[ -n "$address" ] || address="0.0.0.0:8500"

case "$address" in
  unix:*) ;;
  0.0.0.0:*) address="127.0.0.1:${address#0.0.0.0:}" ;;
  "[::]:"*) address="[::1]:${address#\[::\]:}" ;;
  :*) address="127.0.0.1$address" ;;
esac
case "$address" in
  *:0) echo "jagrank-healthcheck: the server listens on port 0 (any free port): set a fixed --grpc-address" >&2; exit 1 ;;
esac

exec jagrank-client --health --address "$address" --timeout-ms 2000
