// Process-wide set-up for binaries that use gRPC (server, loadgen, client),
// and the "name=value" list of extra gRPC channel arguments they accept.
#ifndef JAGRANK_COMMON_PROCESS_H_
#define JAGRANK_COMMON_PROCESS_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace jagrank {

// Turns off Abseil's Mutex deadlock detection unless the environment sets
// JAGRANK_ABSL_DEADLOCK_CHECK=1. Returns whether detection stays on.
//
// Debian builds Abseil without NDEBUG, so its Mutex runs the debug-mode lock
// order checker: every lock gRPC takes (per call, per read, per write) looks
// the mutex up in one process-wide graph behind one global spin lock. That
// costs CPU on every call and serialises all of gRPC's threads on that lock,
// so a loaded server stops scaling with cores. It can also abort the process
// on a false cycle in gRPC's own shutdown paths. Call before the first gRPC
// object is made; safe to call again.
bool ConfigureGrpcProcess();

// The cores this process may run on: the CPUs in its affinity mask
// (taskset, a container's cpuset), and no more than a cgroup v2 CPU quota
// (`cpu.max`, e.g. podman --cpus 2.5 -> 3) allows; at least 1. Thread pools
// and polling threads are sized from it: std::thread::hardware_concurrency()
// counts every CPU of the host, and more busy threads than usable cores
// only take turns on them. Read once, at the first call. Thread-safe.
int UsableCores();

// The same from explicit inputs, for tests: `affinity_cpus` (0 = unknown),
// the text of a cgroup v2 `cpu.max` file ("max 100000", "250000 100000";
// "" = none) and the host's CPU count.
int UsableCoresFrom(int affinity_cpus, const std::string& cpu_max, int host_cpus);

// The file of the shared object whose malloc this process calls (e.g.
// ".../libtcmalloc_minimal.so.4" or ".../libc.so.6"), for the start-up log.
std::string MallocLibrary();

// One extra gRPC channel argument (grpc/impl/channel_arg_names.h).
struct GrpcChannelArg {
  std::string name;
  std::string value;     // as written
  bool is_int = false;   // value is a whole number in int range: passed as an integer
  int int_value = 0;
};

// A channel argument a binary does not take from the list, and why (the
// setting it comes from, or what it would break).
struct ReservedGrpcChannelArg {
  std::string name;
  std::string why;
};

// Parses "name=value[,name=value...]" ("" = none) into `out`. Every name
// must start with "grpc." (gRPC ignores names it does not know, so a typo
// would otherwise pass silently), appear once and not be in `reserved`.
// `field` names the setting in the error, e.g. "server config
// grpc_channel_args".
Status ParseGrpcChannelArgs(const std::string& spec, const std::vector<ReservedGrpcChannelArg>& reserved,
                            const std::string& field, std::vector<GrpcChannelArg>* out);

}  // namespace jagrank

#endif  // JAGRANK_COMMON_PROCESS_H_
