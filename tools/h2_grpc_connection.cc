#include "tools/h2_grpc_connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/process.h"
#include "common/socket_address.h"

namespace jagrank {
namespace {

constexpr int kUnavailable = 14;
constexpr int kInternal = 13;
// Bytes gathered from nghttp2 before one send(): several calls' frames go
// out in one system call when a loop iteration started many.
constexpr size_t kMaxGatheredBytes = 1 << 20;
// Receive windows: responses are small, but hundreds are in flight on one
// connection, so neither window should make the server wait for an update.
constexpr int32_t kStreamWindowBytes = 1 << 24;
constexpr int32_t kConnectionWindowBytes = 1 << 30;

nghttp2_nv Header(const char* name, const std::string& value, uint8_t flags) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name)),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), std::strlen(name), value.size(), flags};
}

nghttp2_nv Header(const char* name, const char* value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name)), reinterpret_cast<uint8_t*>(const_cast<char*>(value)),
          std::strlen(name), std::strlen(value), NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
}

// A connected, non-blocking socket to `address`, or -1 with *error set.
int ConnectSocket(const std::string& address, std::string* error) {
  SocketAddress where;
  const Status parsed = ParseSocketAddress("address", address, &where);
  if (!parsed.ok()) {
    *error = parsed.message();
    return -1;
  }
  sockaddr_un unix_addr = {};
  unix_addr.sun_family = AF_UNIX;
  std::memcpy(unix_addr.sun_path, where.unix_path.data(), where.unix_path.size());
  const std::string port_text = std::to_string(where.port);
  int fd = -1;
  if (where.is_unix) {
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&unix_addr), sizeof(unix_addr)) != 0) {
      *error = "connect to " + address + ": " + std::strerror(errno);
      if (fd >= 0) close(fd);
      return -1;
    }
  } else {
    addrinfo hints = {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = getaddrinfo(where.host.c_str(), port_text.c_str(), &hints, &found);
    if (rc != 0) {
      *error = "resolve " + address + ": " + gai_strerror(rc);
      return -1;
    }
    *error = "connect to " + address + ": no address";
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
      *error = "connect to " + address + ": " + std::strerror(errno);
      close(fd);
      fd = -1;
    }
    freeaddrinfo(found);
    if (fd < 0) return -1;
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
    *error = std::string("set O_NONBLOCK: ") + std::strerror(errno);
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

// One call in flight. Linked into the connection's list of open calls so
// that a failed connection can end each of them.
struct H2GrpcConnection::Stream {
  void* tag = nullptr;
  std::string_view body;  // the framed request
  size_t sent = 0;        // of body, handed to nghttp2
  bool keep_response = false;
  int http_status = 0;
  int grpc_status = -1;  // -1: no grpc-status header yet
  std::string grpc_message;
  std::string response;  // DATA bytes, when keep_response
  std::chrono::steady_clock::time_point request_sent;      // the body's last byte framed
  std::chrono::steady_clock::time_point response_started;  // the first response header
  Stream* prev = nullptr;
  Stream* next = nullptr;
};

struct H2Callbacks {
  static H2GrpcConnection::Stream* StreamOf(nghttp2_session* session, int32_t stream_id) {
    return static_cast<H2GrpcConnection::Stream*>(nghttp2_session_get_stream_user_data(session, stream_id));
  }

  static int OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                      const uint8_t* value, size_t valuelen, uint8_t /*flags*/, void* /*user_data*/) {
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    H2GrpcConnection::Stream* stream = StreamOf(session, frame->hd.stream_id);
    if (stream == nullptr) return 0;
    const std::string_view key(reinterpret_cast<const char*>(name), namelen);
    const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    if (key == ":status") {
      stream->response_started = std::chrono::steady_clock::now();
      stream->http_status = ParseCode(v);
    } else if (key == "grpc-status") {
      stream->grpc_status = ParseCode(v);
    } else if (key == "grpc-message") {
      stream->grpc_message = std::string(v);
    }
    return 0;
  }

  // A status code's digits; kInternal when they are not 1-3 digits.
  static int ParseCode(std::string_view digits) {
    if (digits.empty() || digits.size() > 3) return kInternal;
    int code = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return kInternal;
      code = code * 10 + (c - '0');
    }
    return code;
  }

  static int OnDataChunk(nghttp2_session* session, uint8_t /*flags*/, int32_t stream_id, const uint8_t* data,
                         size_t len, void* /*user_data*/) {
    H2GrpcConnection::Stream* stream = StreamOf(session, stream_id);
    if (stream != nullptr && stream->keep_response) stream->response.append(reinterpret_cast<const char*>(data), len);
    return 0;
  }

  static int OnStreamClose(nghttp2_session* session, int32_t stream_id, uint32_t error_code, void* user_data) {
    H2GrpcConnection::Stream* stream = StreamOf(session, stream_id);
    if (stream == nullptr) return 0;
    H2CallResult result;
    result.request_sent = stream->request_sent;
    result.response_started = stream->response_started;
    if (stream->grpc_status >= 0) {
      result.code = stream->grpc_status;
      result.message = stream->grpc_message;
    } else if (error_code != NGHTTP2_NO_ERROR) {
      result.code = kUnavailable;
      result.message = std::string("stream reset: ") + nghttp2_http2_strerror(error_code);
    } else {
      result.code = kInternal;
      result.message = "response without grpc-status (HTTP status " + std::to_string(stream->http_status) + ")";
    }
    if (result.code == 0 && stream->keep_response) {
      // One message: flag 0 (uncompressed), 4-byte big-endian length, bytes.
      const std::string& r = stream->response;
      const auto* p = reinterpret_cast<const uint8_t*>(r.data());
      const size_t length = r.size() >= 5 ? (size_t{p[1]} << 24 | size_t{p[2]} << 16 | size_t{p[3]} << 8 | p[4]) : 0;
      if (r.size() < 5 || p[0] != 0 || length != r.size() - 5) {
        result.code = kInternal;
        result.message = "response is not one uncompressed gRPC message (" + std::to_string(r.size()) + " bytes)";
      } else {
        result.response = std::string_view(r).substr(5);
      }
    }
    nghttp2_session_set_stream_user_data(session, stream_id, nullptr);
    static_cast<H2GrpcConnection*>(user_data)->Finish(stream, result);
    return 0;
  }

  static ssize_t ReadBody(nghttp2_session* /*session*/, int32_t /*stream_id*/, uint8_t* buf, size_t length,
                          uint32_t* data_flags, nghttp2_data_source* source, void* /*user_data*/) {
    auto* stream = static_cast<H2GrpcConnection::Stream*>(source->ptr);
    const size_t n = std::min(length, stream->body.size() - stream->sent);
    std::memcpy(buf, stream->body.data() + stream->sent, n);
    stream->sent += n;
    if (stream->sent == stream->body.size()) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF;
      stream->request_sent = std::chrono::steady_clock::now();
    }
    return static_cast<ssize_t>(n);
  }
};

std::string FrameGrpcMessage(std::string_view message) {
  const uint32_t n = static_cast<uint32_t>(message.size());
  std::string framed(5, '\0');
  framed[1] = static_cast<char>(n >> 24);
  framed[2] = static_cast<char>(n >> 16);
  framed[3] = static_cast<char>(n >> 8);
  framed[4] = static_cast<char>(n);
  framed.append(message);
  return framed;
}

H2GrpcConnection::H2GrpcConnection(int fd, std::string authority, DoneCallback done)
    : fd_(fd), authority_(std::move(authority)), done_(std::move(done)) {}

std::unique_ptr<H2GrpcConnection> H2GrpcConnection::Connect(const std::string& address, DoneCallback done,
                                                            std::string* error) {
  const int fd = ConnectSocket(address, error);
  if (fd < 0) return nullptr;
  const std::string authority = address.rfind("unix:", 0) == 0 ? "localhost" : address;
  std::unique_ptr<H2GrpcConnection> connection(new H2GrpcConnection(fd, authority, std::move(done)));
  if (!connection->Init(error)) return nullptr;
  return connection;
}

bool H2GrpcConnection::Init(std::string* error) {
  nghttp2_session_callbacks* callbacks = nullptr;
  if (nghttp2_session_callbacks_new(&callbacks) != 0) {
    *error = "nghttp2_session_callbacks_new failed";
    return false;
  }
  nghttp2_session_callbacks_set_on_header_callback(callbacks, &H2Callbacks::OnHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &H2Callbacks::OnDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &H2Callbacks::OnStreamClose);
  const int rc = nghttp2_session_client_new(&session_, callbacks, this);
  nghttp2_session_callbacks_del(callbacks);
  if (rc != 0) {
    *error = std::string("nghttp2_session_client_new: ") + nghttp2_strerror(rc);
    return false;
  }
  const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                             {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindowBytes}};
  if (nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 2) != 0 ||
      nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindowBytes) != 0) {
    *error = "nghttp2: cannot queue the connection's SETTINGS";
    return false;
  }
  if (!Flush()) {
    *error = "cannot send the HTTP/2 preface to " + authority_;
    return false;
  }
  return true;
}

H2GrpcConnection::~H2GrpcConnection() {
  if (!closed_) Fail("connection closed by the client");
}

bool H2GrpcConnection::StartCall(const char* method, std::string_view framed, int64_t timeout_ms,
                                 bool keep_response, void* tag) {
  if (closed_) return false;
  if (timeout_ms != timeout_ms_) {
    // gRPC allows at most 8 digits: the longest timeouts go out in seconds.
    timeout_value_ = timeout_ms < 100000000 ? std::to_string(timeout_ms) + "m" : std::to_string(timeout_ms / 1000) + "S";
    timeout_ms_ = timeout_ms;
  }
  const nghttp2_nv headers[] = {
      Header(":method", "POST"),
      Header(":scheme", "http"),
      Header(":path", method),
      Header(":authority", authority_, NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE),
      Header("content-type", "application/grpc"),
      Header("te", "trailers"),
      Header("grpc-timeout", timeout_value_, NGHTTP2_NV_FLAG_NO_COPY_NAME),  // copied: it can change
  };
  auto* stream = new Stream;
  stream->tag = tag;
  stream->body = framed;
  stream->keep_response = keep_response;
  nghttp2_data_provider body;
  body.source.ptr = stream;
  body.read_callback = &H2Callbacks::ReadBody;
  const int32_t id = nghttp2_submit_request(session_, nullptr, headers, sizeof(headers) / sizeof(headers[0]), &body,
                                            stream);
  if (id < 0) {  // not Fail(): this may run inside nghttp2_session_mem_recv
    delete stream;
    return false;
  }
  stream->next = streams_;
  if (streams_ != nullptr) streams_->prev = stream;
  streams_ = stream;
  return true;
}

void H2GrpcConnection::Finish(Stream* stream, const H2CallResult& result) {
  if (stream->prev != nullptr) stream->prev->next = stream->next;
  if (stream->next != nullptr) stream->next->prev = stream->prev;
  if (streams_ == stream) streams_ = stream->next;
  void* tag = stream->tag;
  // The callback may start the next call (on this connection too); the
  // stream is unlinked first and freed after, as `result` may point into it.
  done_(tag, result);
  delete stream;
}

bool H2GrpcConnection::OnReadable() {
  if (closed_) return false;
  uint8_t buffer[64 * 1024];
  for (;;) {
    const ssize_t n = read(fd_, buffer, sizeof(buffer));
    if (n > 0) {
      const ssize_t used = nghttp2_session_mem_recv(session_, buffer, static_cast<size_t>(n));
      if (used < 0) {
        Fail(std::string("HTTP/2 from the server: ") + nghttp2_strerror(static_cast<int>(used)));
        return false;
      }
      if (static_cast<size_t>(n) < sizeof(buffer)) break;  // drained (epoll is level-triggered)
    } else if (n == 0) {
      Fail("the server closed the connection");
      return false;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else {
      Fail(std::string("read: ") + std::strerror(errno));
      return false;
    }
  }
  return Flush();
}

bool H2GrpcConnection::Flush() {
  if (closed_) return false;
  for (;;) {
    if (write_offset_ == out_.size()) {
      out_.clear();
      write_offset_ = 0;
    }
    while (out_.size() - write_offset_ < kMaxGatheredBytes) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        Fail(std::string("nghttp2_session_mem_send: ") + nghttp2_strerror(static_cast<int>(n)));
        return false;
      }
      if (n == 0) break;
      out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (write_offset_ == out_.size()) break;  // nothing to send
    const ssize_t w = send(fd_, out_.data() + write_offset_, out_.size() - write_offset_, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;  // the owner waits for EPOLLOUT
      Fail(std::string("send: ") + std::strerror(errno));
      return false;
    }
    write_offset_ += static_cast<size_t>(w);
    if (write_offset_ < out_.size()) break;  // the socket took part: wait for EPOLLOUT
  }
  if (!WantsWrite() && nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) {
    Fail("the server ended the connection (GOAWAY)");
    return false;
  }
  return true;
}

void H2GrpcConnection::Fail(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  H2CallResult result;
  result.code = kUnavailable;
  result.message = reason;
  while (streams_ != nullptr) {
    Stream* stream = streams_;
    Finish(stream, result);
  }
  nghttp2_session_del(session_);  // runs no callbacks: every stream's user data is gone
  session_ = nullptr;
  close(fd_);
  fd_ = -1;
}

}  // namespace jagrank
