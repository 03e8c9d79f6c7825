#include "server/grpc_process.h"

#include <absl/synchronization/mutex.h>

#include <cstdlib>
#include <cstring>

namespace jagrank {

bool ConfigureGrpcProcess() {
  const char* keep = std::getenv("JAGRANK_ABSL_DEADLOCK_CHECK");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return true;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return false;
}

}  // namespace jagrank
