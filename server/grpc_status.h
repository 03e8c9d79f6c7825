// The one place where jagrank Status becomes a gRPC status.
#ifndef JAGRANK_SERVER_GRPC_STATUS_H_
#define JAGRANK_SERVER_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "common/status.h"

namespace jagrank {

// Maps the code one to one (kOk -> OK, kInvalidArgument -> INVALID_ARGUMENT,
// ...). The message is "request <request_id>: <message>" ("request -" when
// the client sent no id) so that a client log line names its request.
grpc::Status ToGrpcStatus(const Status& status, const std::string& request_id);

}  // namespace jagrank

#endif  // JAGRANK_SERVER_GRPC_STATUS_H_
