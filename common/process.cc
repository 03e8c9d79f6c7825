#include "common/process.h"

#include <absl/synchronization/mutex.h>
#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace jagrank {

bool ConfigureGrpcProcess() {
  const char* keep = std::getenv("JAGRANK_ABSL_DEADLOCK_CHECK");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return true;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return false;
}

int UsableCoresFrom(int affinity_cpus, const std::string& cpu_max, int host_cpus) {
  int cores = affinity_cpus > 0 ? affinity_cpus : std::max(1, host_cpus);
  std::istringstream in(cpu_max);
  std::string quota;
  long long period = 0;
  if (in >> quota >> period && quota != "max" && period > 0) {
    char* end = nullptr;
    const long long q = std::strtoll(quota.c_str(), &end, 10);
    if (end != quota.c_str() && *end == '\0' && q > 0) {
      const long long allowed = (q + period - 1) / period;  // a partial core still runs a thread
      cores = static_cast<int>(std::min<long long>(cores, allowed));
    }
  }
  return std::max(1, cores);
}

int UsableCores() {
  static const int cores = [] {
    int affinity = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) affinity = CPU_COUNT(&set);
    // cgroup v2: the line "0::/path" of /proc/self/cgroup names the
    // process's group ("/" inside a container with its own namespace).
    std::string line, group;
    std::ifstream cgroup("/proc/self/cgroup");
    while (std::getline(cgroup, line)) {
      if (line.rfind("0::", 0) == 0) group = line.substr(3);
    }
    std::string cpu_max;
    std::ifstream file("/sys/fs/cgroup" + (group == "/" ? std::string() : group) + "/cpu.max");
    if (file) std::getline(file, cpu_max);
    return UsableCoresFrom(affinity, cpu_max, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return cores;
}

std::string MallocLibrary() {
  // The address of malloc as the dynamic linker resolved it for this
  // executable: the first definition in load order (an interposed allocator
  // when one is linked or preloaded).
  void* (*resolved)(size_t) = &malloc;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(resolved), &info) == 0 || info.dli_fname == nullptr) return "unknown";
  return info.dli_fname;
}

Status ParseGrpcChannelArgs(const std::string& spec, const std::vector<ReservedGrpcChannelArg>& reserved,
                            const std::string& field, std::vector<GrpcChannelArg>* out) {
  std::vector<GrpcChannelArg> args;
  size_t start = 0;
  while (start < spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(start, end - start);
    start = end + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      return Status::InvalidArgument(field + ": '" + item + "' is not name=value");
    }
    GrpcChannelArg arg;
    arg.name = item.substr(0, eq);
    arg.value = item.substr(eq + 1);
    if (arg.name.rfind("grpc.", 0) != 0) {
      return Status::InvalidArgument(field + ": '" + arg.name + "' is not a gRPC channel argument (names start with 'grpc.')");
    }
    for (const ReservedGrpcChannelArg& r : reserved) {
      if (r.name == arg.name) return Status::InvalidArgument(field + ": '" + arg.name + "' is not allowed: " + r.why);
    }
    for (const GrpcChannelArg& seen : args) {
      if (seen.name == arg.name) return Status::InvalidArgument(field + ": '" + arg.name + "' is given twice");
    }
    errno = 0;
    char* rest = nullptr;
    const long long n = std::strtoll(arg.value.c_str(), &rest, 10);
    if (errno == 0 && rest != nullptr && *rest == '\0' && n >= INT_MIN && n <= INT_MAX) {
      arg.is_int = true;
      arg.int_value = static_cast<int>(n);
    }
    args.push_back(std::move(arg));
  }
  if (!spec.empty() && spec.back() == ',') return Status::InvalidArgument(field + ": ends with ','");
  *out = std::move(args);
  return Status::Ok();
}

}  // namespace jagrank
