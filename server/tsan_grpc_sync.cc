// ThreadSanitizer builds only (JAGRANK_SANITIZER=thread): tells TSan about
// the one happens-before edge of gRPC's completion queues, which it cannot
// see because Debian's gRPC is not instrumented. A batch started with a tag
// (grpc_call_start_batch) happens before the completion queue hands that tag
// out (grpc_completion_queue_next / _pluck). Without it, every object a
// poller thread frees after its call's Finish, written before by another
// thread, reads as a race.
//
// These definitions interpose gRPC's own C functions (the executable comes
// first in the dynamic linker's search order; libgrpc++ calls them through
// the PLT) and forward to them.
#include <dlfcn.h>
#include <grpc/grpc.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

namespace {

template <typename Fn>
Fn Next(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_grpc_sync: %s not found\n", name);
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

}  // namespace

extern "C" grpc_call_error grpc_call_start_batch(grpc_call* call, const grpc_op* ops, size_t nops, void* tag,
                                                 void* reserved) {
  using Fn = grpc_call_error (*)(grpc_call*, const grpc_op*, size_t, void*, void*);
  static const Fn real = Next<Fn>("grpc_call_start_batch");
  __tsan_release(tag);
  return real(call, ops, nops, tag, reserved);
}

extern "C" grpc_event grpc_completion_queue_next(grpc_completion_queue* cq, gpr_timespec deadline, void* reserved) {
  using Fn = grpc_event (*)(grpc_completion_queue*, gpr_timespec, void*);
  static const Fn real = Next<Fn>("grpc_completion_queue_next");
  const grpc_event event = real(cq, deadline, reserved);
  if (event.type == GRPC_OP_COMPLETE) __tsan_acquire(event.tag);
  return event;
}

extern "C" grpc_event grpc_completion_queue_pluck(grpc_completion_queue* cq, void* tag, gpr_timespec deadline,
                                                  void* reserved) {
  using Fn = grpc_event (*)(grpc_completion_queue*, void*, gpr_timespec, void*);
  static const Fn real = Next<Fn>("grpc_completion_queue_pluck");
  const grpc_event event = real(cq, tag, deadline, reserved);
  if (event.type == GRPC_OP_COMPLETE) __tsan_acquire(event.tag);
  return event;
}
