// Status: the error type of every jagrank module. No exceptions cross a module
// boundary; functions that can fail return Status (and fill out-parameters).
#ifndef JAGRANK_COMMON_STATUS_H_
#define JAGRANK_COMMON_STATUS_H_

#include <string>
#include <utility>

namespace jagrank {

class Status {
 public:
  // Codes mirror the gRPC ones the server maps them to (server/grpc_status.cc
  // holds the only mapping).
  enum class Code {
    kOk = 0,
    kInvalidArgument,    // caller's input is malformed (names field and limit)
    kNotFound,           // a file or named thing does not exist
    kResourceExhausted,  // queue full, out of memory
    kDeadlineExceeded,   // the request's deadline passed before compute
    kUnavailable,        // shutting down / not ready
    kCancelled,          // the client went away
    kUnimplemented,      // unsupported configuration (e.g. a head dim)
    kInternal,           // a bug or a device failure
  };

  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
  static Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
  static Status ResourceExhausted(std::string m) { return Status(Code::kResourceExhausted, std::move(m)); }
  static Status DeadlineExceeded(std::string m) { return Status(Code::kDeadlineExceeded, std::move(m)); }
  static Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
  static Status Cancelled(std::string m) { return Status(Code::kCancelled, std::move(m)); }
  static Status Unimplemented(std::string m) { return Status(Code::kUnimplemented, std::move(m)); }
  static Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;  // "INVALID_ARGUMENT: message", or "OK"

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

const char* StatusCodeName(Status::Code code);

inline std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

inline const char* StatusCodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk: return "OK";
    case Status::Code::kInvalidArgument: return "INVALID_ARGUMENT";
    case Status::Code::kNotFound: return "NOT_FOUND";
    case Status::Code::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case Status::Code::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case Status::Code::kUnavailable: return "UNAVAILABLE";
    case Status::Code::kCancelled: return "CANCELLED";
    case Status::Code::kUnimplemented: return "UNIMPLEMENTED";
    case Status::Code::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

}  // namespace jagrank

// Evaluates `expr` (a Status) once and returns it from the caller if not OK.
#define JAGRANK_RETURN_IF_ERROR(expr)                 \
  do {                                                \
    ::jagrank::Status jagrank_status_ = (expr);       \
    if (!jagrank_status_.ok()) return jagrank_status_; \
  } while (0)
#define RETURN_IF_ERROR(expr) JAGRANK_RETURN_IF_ERROR(expr)

#endif  // JAGRANK_COMMON_STATUS_H_
