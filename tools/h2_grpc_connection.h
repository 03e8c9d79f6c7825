// H2GrpcConnection: unary gRPC calls over one HTTP/2 connection made with
// libnghttp2, for jagrank-loadgen's `--engine nghttp2`.
//
// Why: in the benchmarks the load generator shares the host's cores with the
// server, and gRPC C++'s client costs ~31 us of CPU per call there (H200
// host, h1024, 32 channels), taken from the server. This speaks gRPC's wire
// protocol (HTTP/2 POST, `content-type: application/grpc`, length-prefixed
// messages, `grpc-status` in the trailers) with nghttp2's framing and HPACK,
// on one non-blocking socket, with no threads, completion queues or per-call
// contexts of its own. It is a client for load, not a general gRPC client:
// no TLS, no compression, no retries, no name resolution beyond getaddrinfo.
//
// Thread safety: none. One thread owns a connection and makes every call on
// it (the loadgen's event loops each own theirs).
#ifndef JAGRANK_TOOLS_H2_GRPC_CONNECTION_H_
#define JAGRANK_TOOLS_H2_GRPC_CONNECTION_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

struct nghttp2_session;

namespace jagrank {

// What one call ended with. `code` is the gRPC status code (0 = OK) from the
// `grpc-status` trailer, or one the client chose when there is none:
// UNAVAILABLE (14) when the stream or connection failed, INTERNAL (13) when
// the response broke the protocol (no grpc-status, HTTP status not 200).
struct H2CallResult {
  int code = 0;
  std::string message;      // grpc-message (percent-encoded as sent) or the client's reason
  std::string_view response;  // the response message without its 5-byte prefix; valid in the callback only
  // When nghttp2 took the request's last byte into a frame (it goes to the
  // socket in the same Flush unless the socket is full), and when the
  // response's first header arrived; epoch (zero) if that did not happen.
  std::chrono::steady_clock::time_point request_sent;
  std::chrono::steady_clock::time_point response_started;
};

class H2GrpcConnection {
 public:
  // `tag` is the value given to StartCall.
  using DoneCallback = std::function<void(void* tag, const H2CallResult& result)>;

  // Connects (blocking) to "host:port" or "unix:/path", sends the HTTP/2
  // preface and SETTINGS, and leaves the socket non-blocking.
  // Returns nullptr and sets *error when the address or the connect fails.
  static std::unique_ptr<H2GrpcConnection> Connect(const std::string& address, DoneCallback done,
                                                   std::string* error);
  ~H2GrpcConnection();
  H2GrpcConnection(const H2GrpcConnection&) = delete;
  H2GrpcConnection& operator=(const H2GrpcConnection&) = delete;

  // The socket, for the owner's epoll set.
  int fd() const { return fd_; }

  // Queues a unary call of `method` (e.g. "/jagrank.v1.Ranker/Rank") whose
  // body is `framed`: one gRPC length-prefixed message (FrameGrpcMessage).
  // REQUIRES: `method` and `framed` stay valid until the call's callback
  // has run. Nothing is written until Flush. `keep_response`: whether the
  // callback gets the response message (otherwise its bytes are dropped).
  // `timeout_ms` goes out as the grpc-timeout header (the server enforces it).
  // Returns false, and the callback never runs, when the call cannot start
  // (the connection is closed, or nghttp2 refused the stream).
  // May be called from a DoneCallback.
  bool StartCall(const char* method, std::string_view framed, int64_t timeout_ms, bool keep_response, void* tag);

  // Reads all the socket has, running callbacks for the calls that end.
  // Returns false once the connection is closed (by the peer or an error);
  // every call still open has then had its callback (UNAVAILABLE).
  bool OnReadable();

  // Writes what nghttp2 has queued, as far as the socket takes it.
  // Returns false once the connection is closed, as OnReadable.
  bool Flush();

  // Whether output is waiting for the socket to become writable (the
  // owner then waits for EPOLLOUT and calls Flush).
  bool WantsWrite() const { return write_offset_ < out_.size(); }

  bool closed() const { return closed_; }

 private:
  struct Stream;
  H2GrpcConnection(int fd, std::string authority, DoneCallback done);
  bool Init(std::string* error);
  // Ends every open call with UNAVAILABLE and closes the socket.
  void Fail(const std::string& reason);
  void Finish(Stream* stream, const H2CallResult& result);

  friend struct H2Callbacks;  // nghttp2's callbacks (h2_grpc_connection.cc)

  int fd_ = -1;
  const std::string authority_;
  DoneCallback done_;
  nghttp2_session* session_ = nullptr;
  std::string out_;          // bytes nghttp2 produced that the socket has not taken yet
  size_t write_offset_ = 0;  // of out_, already written
  bool closed_ = false;
  Stream* streams_ = nullptr;   // the open calls, a doubly-linked list
  std::string timeout_value_;   // grpc-timeout of the last call, e.g. "5000m"
  int64_t timeout_ms_ = -1;     // ... and the timeout it was made from
};

// `message` with gRPC's 5-byte prefix: a zero compressed-flag byte and the
// length, big-endian.
std::string FrameGrpcMessage(std::string_view message);

}  // namespace jagrank

#endif  // JAGRANK_TOOLS_H2_GRPC_CONNECTION_H_
