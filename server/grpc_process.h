// Process-wide set-up for binaries that use gRPC (server, loadgen, client).
#pragma once

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

}  // namespace jagrank
