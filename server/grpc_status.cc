#include "server/grpc_status.h"

namespace jagrank {

grpc::Status ToGrpcStatus(const Status& status, const std::string& request_id) {
  if (status.ok()) return grpc::Status::OK;
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (status.code()) {
    case Status::Code::kOk: return grpc::Status::OK;
    case Status::Code::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case Status::Code::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case Status::Code::kResourceExhausted: code = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case Status::Code::kDeadlineExceeded: code = grpc::StatusCode::DEADLINE_EXCEEDED; break;
    case Status::Code::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    case Status::Code::kCancelled: code = grpc::StatusCode::CANCELLED; break;
    case Status::Code::kUnimplemented: code = grpc::StatusCode::UNIMPLEMENTED; break;
    case Status::Code::kInternal: code = grpc::StatusCode::INTERNAL; break;
  }
  return grpc::Status(code, "request " + (request_id.empty() ? std::string("-") : request_id) + ": " +
                                status.message());
}

}  // namespace jagrank
