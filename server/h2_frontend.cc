#include "server/h2_frontend.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <utility>

#include "common/process.h"
#include "common/socket_address.h"
#include "server/grpc_status.h"
#include "server/server.h"

namespace jagrank {
namespace {

// gRPC status codes used here (grpc/status.h's numbers).
constexpr int kGrpcNotFound = 5;
constexpr int kGrpcResourceExhausted = 8;
constexpr int kGrpcUnimplemented = 12;
constexpr int kGrpcInternal = 13;
constexpr int kGrpcUnavailable = 14;

// Receive windows: a connection carries up to grpc_max_concurrent_streams
// requests of a few KiB at once; neither window should make a client wait
// for an update while the loop is busy.
constexpr int32_t kStreamWindowBytes = 1 << 20;
constexpr int32_t kConnectionWindowBytes = 1 << 26;
// Request bytes one connection may hold in requests not yet complete; above
// it a request is refused (RESOURCE_EXHAUSTED) and its bytes dropped, so a
// client cannot make the server buffer max_concurrent_streams x the message
// cap.
constexpr int64_t kMaxBufferedBytesPerConnection = 256LL << 20;
// Bytes gathered from nghttp2 before one send().
constexpr size_t kMaxGatheredBytes = 1 << 20;
// One read() per connection per wake-up at most this many times, so one busy
// connection cannot starve the loop's others (epoll is level-triggered).
constexpr int kMaxReadsPerWakeup = 4;
// Stop(): how long the loops try to write what is queued before closing.
constexpr auto kStopFlushTime = std::chrono::seconds(1);

constexpr const char* kRankPath = "/jagrank.v1.Ranker/Rank";
constexpr const char* kModelInfoPath = "/jagrank.v1.Ranker/GetModelInfo";
constexpr const char* kHealthCheckPath = "/grpc.health.v1.Health/Check";

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

nghttp2_nv StaticHeader(const char* name, const char* value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name)), reinterpret_cast<uint8_t*>(const_cast<char*>(value)),
          std::strlen(name), std::strlen(value), NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
}

nghttp2_nv CopiedHeader(const char* name, const std::string& value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name)),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), std::strlen(name), value.size(),
          NGHTTP2_NV_FLAG_NO_COPY_NAME};
}

// grpc-timeout: 1 to 8 digits and a unit (H, M, S, m, u, n). False when malformed.
bool ParseGrpcTimeout(std::string_view value, Clock::duration* out) {
  if (value.size() < 2 || value.size() > 9) return false;
  int64_t n = 0;
  for (char c : value.substr(0, value.size() - 1)) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + (c - '0');
  }
  switch (value.back()) {
    case 'H': *out = std::chrono::hours(n); return true;
    case 'M': *out = std::chrono::minutes(n); return true;
    case 'S': *out = std::chrono::seconds(n); return true;
    case 'm': *out = std::chrono::milliseconds(n); return true;
    case 'u': *out = std::chrono::microseconds(n); return true;
    case 'n': *out = std::chrono::nanoseconds(n); return true;
    default: return false;
  }
}

// grpc-message is percent-encoded: bytes outside printable ASCII, and '%'.
std::string PercentEncode(const std::string& message) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(message.size());
  for (unsigned char c : message) {
    if (c < 0x20 || c > 0x7E || c == '%') {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// `message` as a gRPC length-prefixed message: flag 0, big-endian length.
void FrameMessage(const google::protobuf::MessageLite& message, std::string* out) {
  const size_t n = message.ByteSizeLong();
  out->resize(5 + n);
  auto* p = reinterpret_cast<uint8_t*>(&(*out)[0]);
  p[0] = 0;
  p[1] = static_cast<uint8_t>(n >> 24);
  p[2] = static_cast<uint8_t>(n >> 16);
  p[3] = static_cast<uint8_t>(n >> 8);
  p[4] = static_cast<uint8_t>(n);
  message.SerializeWithCachedSizesToArray(p + 5);
}

// grpc.health.v1.HealthCheckRequest's `service` (field 1); false when the
// bytes are not that message.
bool ParseHealthCheckRequest(const uint8_t* data, size_t size, std::string* service) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(data, static_cast<int>(size));
  for (;;) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return in.CurrentPosition() == static_cast<int>(size);
    if (tag == WireFormatLite::MakeTag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length) || !in.ReadString(service, static_cast<int>(length))) return false;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
  }
}

// A listening socket on `address` (host:port or unix:/path), or -1 with
// *error set. *port: the bound TCP port (0 for unix sockets).
int Listen(const std::string& address, int* port, std::string* unix_path, std::string* error) {
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
    const std::string path = where.unix_path;
    unlink(path.c_str());  // a stale socket file from an earlier run
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&unix_addr), sizeof(unix_addr)) != 0) {
      *error = "bind " + address + ": " + std::strerror(errno);
      if (fd >= 0) close(fd);
      return -1;
    }
    *unix_path = path;
    *port = 0;
  } else {
    addrinfo hints = {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    const int rc = getaddrinfo(where.host.empty() ? nullptr : where.host.c_str(), port_text.c_str(), &hints, &found);
    if (rc != 0) {
      *error = "resolve " + address + ": " + gai_strerror(rc);
      return -1;
    }
    *error = "bind " + address + ": no address";
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) continue;
      const int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (bind(fd, a->ai_addr, a->ai_addrlen) == 0) break;
      *error = "bind " + address + ": " + std::strerror(errno);
      close(fd);
      fd = -1;
    }
    freeaddrinfo(found);
    if (fd < 0) return -1;
    sockaddr_storage bound = {};
    socklen_t length = sizeof(bound);
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
    *port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  if (listen(fd, SOMAXCONN) != 0) {
    *error = "listen " + address + ": " + std::strerror(errno);
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

// One stream (one call) from its first header to its close. Owned by its
// connection until it is admitted; from then until its done callback has
// come back to the loop it is also referenced by the batcher, so it is
// freed by whichever of "stream closed" and "done came back" happens last.
// Only the loop thread touches it, except: the executor reads `request`,
// `cancelled`, and writes `reply`, `code` and `message` in the done
// callback, while `queued` is true (the loop leaves those alone then).
struct H2Frontend::Call {
  enum class Method { kUnknown, kRank, kModelInfo, kHealthCheck };

  Loop* loop = nullptr;
  Connection* connection = nullptr;  // null once the stream is closed or the connection gone
  int32_t stream_id = 0;
  Clock::time_point headers_at;  // the first header frame: grpc-timeout counts from here
  Method method = Method::kUnknown;
  std::string path;  // for errors; at most kMaxPathInMessage bytes
  bool post = false;
  bool grpc_content_type = false;
  bool has_timeout = false;
  bool bad_timeout = false;
  Clock::duration timeout{};
  std::string body;  // request bytes until dispatched
  bool too_large = false;
  v1::RankRequest request;
  // The answer: `code` (gRPC status) and `message`, and for OK the framed
  // response message.
  std::string reply;
  size_t reply_sent = 0;
  int code = 0;
  std::string message;
  std::atomic<bool> cancelled{false};  // the stream closed while queued
  bool queued = false;     // admitted; its done has not come back to the loop
  bool responded = false;  // the answer was handed to nghttp2
  Clock::time_point reply_started;
  Call* prev = nullptr;  // the connection's list of open calls
  Call* next = nullptr;

  static constexpr size_t kMaxPathInMessage = 200;
};

// One client connection, owned by its loop.
struct H2Frontend::Connection {
  Loop* loop = nullptr;
  int fd = -1;
  nghttp2_session* session = nullptr;
  std::string out;           // bytes nghttp2 produced that the socket has not taken yet
  size_t write_offset = 0;   // of out, already written
  bool want_epollout = false;
  bool dirty = false;   // in loop->dirty
  bool closed = false;  // in loop->graveyard
  Call* calls = nullptr;  // open streams
  int64_t buffered_bytes = 0;  // request bytes held by calls not yet dispatched
  int32_t last_stream_id = 0;  // the highest stream the client opened

  // Loop::Receive's view of the incoming frames (see there).
  size_t preface_left = 24;  // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
  uint8_t header[9] = {};    // a frame header split across reads
  size_t header_have = 0;
  size_t frame_left = 0;     // payload bytes of the current frame still to come
  bool dropping = false;     // the current frame is not given to nghttp2
};

// One event-loop thread and the connections it owns. Other threads reach it
// only through its mailbox (new connections, answered calls, stop).
struct H2Frontend::Loop {
  H2Frontend* frontend = nullptr;
  int epoll_fd = -1;
  int wake_fd = -1;  // eventfd: the mailbox has something
  std::thread thread;
  nghttp2_session_callbacks* callbacks = nullptr;

  std::mutex mu;
  std::vector<int> new_fds;   // guarded by mu
  std::vector<Call*> done;    // guarded by mu: admitted calls whose answer is ready
  bool stop = false;          // guarded by mu

  // Loop thread only.
  std::unordered_set<Connection*> connections;
  std::vector<Connection*> dirty;      // output may be waiting: flushed once per round
  std::vector<Connection*> graveyard;  // closed this round, freed at its end

  // Any thread. Wakes the loop only when the mailbox was empty.
  template <typename Fill>
  void Post(Fill fill) {
    bool was_empty;
    {
      std::lock_guard<std::mutex> lock(mu);
      was_empty = new_fds.empty() && done.empty() && !stop;
      fill();
    }
    if (was_empty) {
      const uint64_t one = 1;
      (void)!write(wake_fd, &one, sizeof(one));
    }
  }

  void Run();
  // Returns true when the loop should stop.
  bool TakeMailbox();
  void AddConnection(int fd);
  void OnReadable(Connection* c);
  // Gives `data` to nghttp2, except RST_STREAM frames for streams the client
  // never opened. False when nghttp2 failed on it (the connection is then
  // closed).
  bool Receive(Connection* c, const uint8_t* data, size_t size);
  void MarkDirty(Connection* c) {
    if (!c->dirty && !c->closed) {
      c->dirty = true;
      dirty.push_back(c);
    }
  }
  void Flush(Connection* c);
  void Close(Connection* c, const char* why);
  void FlushDirtyAndBury();
  void Shutdown();

  // Request handling (the loop thread).
  void Dispatch(Call* call);
  void DispatchRank(Call* call, const uint8_t* message, size_t size);
  void ReplyMessage(Call* call, const google::protobuf::MessageLite& message);
  void ReplyError(Call* call, int code, const std::string& message);
  // A Rank call refused before the service saw it: counted as the service counts its own.
  void RejectRank(Call* call, const Status& status, const char* reason);
  void Respond(Call* call);
  void RespondHttp(Call* call, const char* http_status);
};

struct H2ServerCallbacks {
  using Call = H2Frontend::Call;
  using Connection = H2Frontend::Connection;

  static Call* CallOf(nghttp2_session* session, int32_t stream_id) {
    return static_cast<Call*>(nghttp2_session_get_stream_user_data(session, stream_id));
  }

  static void Unlink(Call* call) {
    Connection* c = call->connection;
    if (c == nullptr) return;
    if (call->prev != nullptr) call->prev->next = call->next;
    if (call->next != nullptr) call->next->prev = call->prev;
    if (c->calls == call) c->calls = call->next;
    call->prev = call->next = nullptr;
    c->buffered_bytes -= static_cast<int64_t>(call->body.size());
    std::string().swap(call->body);
    call->connection = nullptr;
  }

  static int OnBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    auto* c = static_cast<Connection*>(user_data);
    auto* call = new Call;
    call->loop = c->loop;
    call->connection = c;
    call->stream_id = frame->hd.stream_id;
    call->headers_at = Clock::now();
    c->last_stream_id = std::max(c->last_stream_id, frame->hd.stream_id);
    call->next = c->calls;
    if (c->calls != nullptr) c->calls->prev = call;
    c->calls = call;
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, call);
    return 0;
  }

  static int OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                      const uint8_t* value, size_t valuelen, uint8_t /*flags*/, void* /*user_data*/) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    Call* call = CallOf(session, frame->hd.stream_id);
    if (call == nullptr) return 0;
    const std::string_view key(reinterpret_cast<const char*>(name), namelen);
    const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    if (key == ":path") {
      call->path = std::string(v.substr(0, Call::kMaxPathInMessage));
      if (v == kRankPath) {
        call->method = Call::Method::kRank;
      } else if (v == kModelInfoPath) {
        call->method = Call::Method::kModelInfo;
      } else if (v == kHealthCheckPath) {
        call->method = Call::Method::kHealthCheck;
      }
    } else if (key == ":method") {
      call->post = v == "POST";
    } else if (key == "content-type") {
      // application/grpc, application/grpc+proto, application/grpc;...
      call->grpc_content_type = v.rfind("application/grpc", 0) == 0 &&
                                (v.size() == 16 || v[16] == '+' || v[16] == ';');
    } else if (key == "grpc-timeout") {
      call->has_timeout = true;
      call->bad_timeout = !ParseGrpcTimeout(v, &call->timeout);
    }
    return 0;
  }

  static int OnDataChunk(nghttp2_session* session, uint8_t /*flags*/, int32_t stream_id, const uint8_t* data,
                         size_t len, void* user_data) {
    Call* call = CallOf(session, stream_id);
    if (call == nullptr || call->too_large || call->responded || call->queued) return 0;
    auto* c = static_cast<Connection*>(user_data);
    const int64_t cap = call->loop->frontend->config_.grpc_max_receive_message_bytes;
    size_t declared = 0;  // the message length from the 5-byte prefix, once known
    if (call->body.size() + len >= 5) {
      uint8_t prefix[5];
      for (size_t i = 0; i < 5; ++i) prefix[i] = i < call->body.size() ? call->body[i] : data[i - call->body.size()];
      declared = size_t{prefix[1]} << 24 | size_t{prefix[2]} << 16 | size_t{prefix[3]} << 8 | prefix[4];
    }
    if (static_cast<int64_t>(declared) > cap || static_cast<int64_t>(call->body.size() + len) > cap + 5 ||
        c->buffered_bytes + static_cast<int64_t>(len) > kMaxBufferedBytesPerConnection) {
      // Dropped: answered RESOURCE_EXHAUSTED when the request ends.
      call->too_large = true;
      c->buffered_bytes -= static_cast<int64_t>(call->body.size());
      std::string().swap(call->body);
      return 0;
    }
    call->body.append(reinterpret_cast<const char*>(data), len);
    c->buffered_bytes += static_cast<int64_t>(len);
    return 0;
  }

  static int OnFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* /*user_data*/) {
    if ((frame->hd.type != NGHTTP2_DATA && frame->hd.type != NGHTTP2_HEADERS) ||
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) {
      return 0;
    }
    Call* call = CallOf(session, frame->hd.stream_id);
    if (call != nullptr && !call->queued && !call->responded) call->loop->Dispatch(call);
    return 0;
  }

  static int OnStreamClose(nghttp2_session* session, int32_t stream_id, uint32_t error_code, void* /*user_data*/) {
    Call* call = CallOf(session, stream_id);
    if (call == nullptr) return 0;
    nghttp2_session_set_stream_user_data(session, stream_id, nullptr);
    Unlink(call);
    if (call->queued) {  // the client went away: the batcher drops it, and its done frees it
      call->cancelled.store(true, std::memory_order_relaxed);
      return 0;
    }
    if (call->responded && error_code == NGHTTP2_NO_ERROR) {
      call->loop->frontend->metrics_->OnResponseSent(SecondsSince(call->reply_started));
    }
    delete call;
    return 0;
  }

  static ssize_t ReadReply(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
                           uint32_t* data_flags, nghttp2_data_source* source, void* /*user_data*/) {
    auto* call = static_cast<Call*>(source->ptr);
    const size_t n = std::min(length, call->reply.size() - call->reply_sent);
    std::memcpy(buf, call->reply.data() + call->reply_sent, n);
    call->reply_sent += n;
    if (call->reply_sent == call->reply.size()) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF;
      nghttp2_nv trailer = StaticHeader("grpc-status", "0");
      // Without the trailer the stream ends with the data (the client then
      // reports a missing status): only when nghttp2 cannot queue it.
      if (nghttp2_submit_trailer(session, stream_id, &trailer, 1) == 0) *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
    return static_cast<ssize_t>(n);
  }
};

H2Frontend::H2Frontend(const ServerConfig& config, RankerService* service, ServerMetrics* metrics)
    : config_(config), service_(service), metrics_(metrics) {}

H2Frontend::~H2Frontend() { Stop(); }

Status H2Frontend::Start() {
  std::string error;
  listen_fd_ = Listen(config_.h2_address, &port_, &unix_path_, &error);
  if (listen_fd_ < 0) return Status::Unavailable("cannot listen on h2_address '" + config_.h2_address + "': " + error);
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  const int threads = config_.h2_threads > 0 ? config_.h2_threads : service_->CompletionQueueCount();
  for (int i = 0; i < threads; ++i) {
    auto loop = std::make_unique<Loop>();
    loop->frontend = this;
    loop->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    loop->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (loop->epoll_fd < 0 || loop->wake_fd < 0 || stop_fd_ < 0 || nghttp2_session_callbacks_new(&loop->callbacks) != 0) {
      return Status::Internal(std::string("h2 front end: cannot create its event loop: ") + std::strerror(errno));
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(loop->callbacks, &H2ServerCallbacks::OnBeginHeaders);
    nghttp2_session_callbacks_set_on_header_callback(loop->callbacks, &H2ServerCallbacks::OnHeader);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(loop->callbacks, &H2ServerCallbacks::OnDataChunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(loop->callbacks, &H2ServerCallbacks::OnFrameRecv);
    nghttp2_session_callbacks_set_on_stream_close_callback(loop->callbacks, &H2ServerCallbacks::OnStreamClose);
    epoll_event wake = {};
    wake.events = EPOLLIN;
    wake.data.ptr = nullptr;
    epoll_ctl(loop->epoll_fd, EPOLL_CTL_ADD, loop->wake_fd, &wake);
    loops_.push_back(std::move(loop));
  }
  for (auto& loop : loops_) {
    loop->thread = std::thread([l = loop.get()] { l->Run(); });
    // Named here so the name is set when Start returns (bench/serving_h200.sh
    // reports CPU per thread name).
    pthread_setname_np(loop->thread.native_handle(), "jr-h2-loop");
  }
  acceptor_ = std::thread([this] { Accept(); });
  pthread_setname_np(acceptor_.native_handle(), "jr-h2-accept");
  spdlog::info("h2 front end on {} (port {}), {} event loops", config_.h2_address, port_, threads);
  return Status::Ok();
}

void H2Frontend::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (acceptor_.joinable()) {
    const uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof(one));
    acceptor_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
  if (!unix_path_.empty()) unlink(unix_path_.c_str());
  for (auto& loop : loops_) {
    if (loop->thread.joinable()) {
      loop->Post([&] { loop->stop = true; });
      loop->thread.join();
    }
    if (loop->callbacks != nullptr) nghttp2_session_callbacks_del(loop->callbacks);
    if (loop->epoll_fd >= 0) close(loop->epoll_fd);
    if (loop->wake_fd >= 0) close(loop->wake_fd);
  }
  loops_.clear();
  if (stop_fd_ >= 0) close(stop_fd_);
  stop_fd_ = -1;
}

void H2Frontend::Accept() {
  size_t next = 0;
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("h2 front end: poll on the listener: {}; no more connections accepted", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          // Out of descriptors or memory: back off rather than spin.
          spdlog::warn("h2 front end: accept: {}", std::strerror(errno));
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        break;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // fails harmlessly on unix sockets
      Loop* loop = loops_[next++ % loops_.size()].get();
      loop->Post([&] { loop->new_fds.push_back(fd); });
    }
  }
}

void H2Frontend::Loop::Run() {
  epoll_event events[256];
  bool stopping = false;
  while (!stopping) {
    const int n = epoll_wait(epoll_fd, events, 256, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::error("h2 front end: epoll_wait: {}", std::strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      auto* c = static_cast<Connection*>(events[i].data.ptr);
      if (c == nullptr) {
        stopping = TakeMailbox() || stopping;
        continue;
      }
      if (c->closed) continue;
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) OnReadable(c);
      if (events[i].events & EPOLLOUT) MarkDirty(c);
    }
    FlushDirtyAndBury();
  }
  Shutdown();
}

bool H2Frontend::Loop::TakeMailbox() {
  uint64_t count = 0;
  (void)!read(wake_fd, &count, sizeof(count));  // before taking the mailbox: see Post
  std::vector<int> fds;
  std::vector<Call*> answered;
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(mu);
    fds.swap(new_fds);
    answered.swap(done);
    stopping = stop;
  }
  for (Call* call : answered) {
    call->queued = false;
    if (call->connection == nullptr) {  // the stream closed meanwhile
      delete call;
      continue;
    }
    Respond(call);
  }
  for (int fd : fds) {
    if (stopping) {
      close(fd);
    } else {
      AddConnection(fd);
    }
  }
  return stopping;
}

void H2Frontend::Loop::AddConnection(int fd) {
  auto* c = new Connection;
  c->loop = this;
  c->fd = fd;
  if (nghttp2_session_server_new(&c->session, callbacks, c) != 0) {
    spdlog::warn("h2 front end: nghttp2_session_server_new failed; connection dropped");
    close(fd);
    delete c;
    return;
  }
  const ServerConfig& config = frontend->config_;
  std::vector<nghttp2_settings_entry> settings = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindowBytes},
                                                  {NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
  if (config.grpc_max_concurrent_streams > 0) {
    settings.push_back(
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, static_cast<uint32_t>(config.grpc_max_concurrent_streams)});
  }
  nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, settings.data(), settings.size());
  nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, kConnectionWindowBytes);
  epoll_event event = {};
  event.events = EPOLLIN;
  event.data.ptr = c;
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event) != 0) {
    spdlog::warn("h2 front end: epoll_ctl: {}; connection dropped", std::strerror(errno));
    nghttp2_session_del(c->session);
    close(fd);
    delete c;
    return;
  }
  connections.insert(c);
  MarkDirty(c);  // the server's SETTINGS
}

void H2Frontend::Loop::OnReadable(Connection* c) {
  static thread_local uint8_t buffer[64 * 1024];
  for (int i = 0; i < kMaxReadsPerWakeup; ++i) {
    const ssize_t n = read(c->fd, buffer, sizeof(buffer));
    if (n > 0) {
      if (!Receive(c, buffer, static_cast<size_t>(n))) return;
      if (static_cast<size_t>(n) < sizeof(buffer)) break;
    } else if (n == 0) {
      Close(c, "the client closed the connection");
      return;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else {
      Close(c, std::strerror(errno));
      return;
    }
  }
  MarkDirty(c);  // SETTINGS and PING acks, window updates, answers given at once
}

// gRPC C++ clients (1.51) cancel a call whose HEADERS they have not written
// yet with an RST_STREAM for that stream id. gRPC's server ignores it;
// nghttp2 takes it as a connection error (RST_STREAM on an idle stream) and
// ends the connection with every call on it. So the frames are followed
// here: RST_STREAM frames for streams above the highest one the client
// opened are dropped; everything else goes to nghttp2 unchanged.
bool H2Frontend::Loop::Receive(Connection* c, const uint8_t* data, size_t size) {
  auto give = [&](const uint8_t* p, size_t n) {
    if (n == 0) return true;
    const ssize_t used = nghttp2_session_mem_recv(c->session, p, n);
    if (used >= 0) return true;
    // nghttp2 has queued a GOAWAY for protocol errors: try to send it.
    Flush(c);
    Close(c, nghttp2_strerror(static_cast<int>(used)));
    return false;
  };
  // A frame header: length (24 bits), type, flags, stream id (31 bits).
  auto start_frame = [&](const uint8_t* h) {
    c->frame_left = size_t{h[0]} << 16 | size_t{h[1]} << 8 | h[2];
    const int32_t stream = static_cast<int32_t>((uint32_t{h[5]} << 24 | uint32_t{h[6]} << 16 |
                                                 uint32_t{h[7]} << 8 | h[8]) & 0x7fffffffu);
    // (A malformed one, not 4 bytes long, goes on to nghttp2 to be refused.)
    c->dropping = h[3] == NGHTTP2_RST_STREAM && c->frame_left == 4 && stream > c->last_stream_id;
  };
  size_t i = 0, from = 0;  // data[from, i) is still to be given to nghttp2
  while (i < size) {
    if (c->preface_left > 0) {
      const size_t k = std::min(c->preface_left, size - i);
      i += k;
      c->preface_left -= k;
    } else if (c->frame_left > 0) {
      const size_t k = std::min(c->frame_left, size - i);
      if (c->dropping) {
        if (!give(data + from, i - from)) return false;
        from = i + k;
      }
      i += k;
      c->frame_left -= k;
    } else if (c->header_have == 0 && size - i >= 9) {
      if (data[i + 3] == NGHTTP2_RST_STREAM) {
        // Whether its stream was opened depends on the frames before it.
        if (!give(data + from, i - from)) return false;
        from = i;
      }
      start_frame(data + i);
      i += 9;
      if (c->dropping) from = i;
    } else {
      // A header split across reads: hold its bytes back until it is whole.
      if (c->header_have == 0 && !give(data + from, i - from)) return false;
      const size_t k = std::min(9 - c->header_have, size - i);
      std::memcpy(c->header + c->header_have, data + i, k);
      c->header_have += k;
      i += k;
      from = i;
      if (c->header_have < 9) continue;
      c->header_have = 0;
      start_frame(c->header);
      if (!c->dropping && !give(c->header, 9)) return false;
    }
  }
  return give(data + from, size - from);
}

void H2Frontend::Loop::Flush(Connection* c) {
  if (c->closed) return;
  for (;;) {
    if (c->write_offset == c->out.size()) {
      c->out.clear();
      c->write_offset = 0;
    }
    while (c->out.size() - c->write_offset < kMaxGatheredBytes) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(c->session, &data);
      if (n < 0) {
        Close(c, nghttp2_strerror(static_cast<int>(n)));
        return;
      }
      if (n == 0) break;
      c->out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (c->write_offset == c->out.size()) break;
    const ssize_t w = send(c->fd, c->out.data() + c->write_offset, c->out.size() - c->write_offset, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      Close(c, std::strerror(errno));
      return;
    }
    c->write_offset += static_cast<size_t>(w);
    if (c->write_offset < c->out.size()) break;  // the socket is full
  }
  const bool pending = c->write_offset < c->out.size();
  if (pending != c->want_epollout) {
    epoll_event event = {};
    event.events = EPOLLIN | (pending ? EPOLLOUT : 0u);
    event.data.ptr = c;
    epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &event);
    c->want_epollout = pending;
  }
  if (!pending && nghttp2_session_want_read(c->session) == 0 && nghttp2_session_want_write(c->session) == 0) {
    Close(c, "session over (GOAWAY)");
  }
}

void H2Frontend::Loop::Close(Connection* c, const char* why) {
  if (c->closed) return;
  spdlog::debug("h2 front end: closing a connection: {}", why);
  c->closed = true;
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, nullptr);
  close(c->fd);
  // nghttp2_session_del runs no callbacks; the calls are handled below.
  nghttp2_session_del(c->session);
  c->session = nullptr;
  while (c->calls != nullptr) {
    Call* call = c->calls;
    H2ServerCallbacks::Unlink(call);
    if (call->queued) {
      call->cancelled.store(true, std::memory_order_relaxed);  // freed when its done comes back
    } else {
      delete call;
    }
  }
  connections.erase(c);
  graveyard.push_back(c);
}

void H2Frontend::Loop::FlushDirtyAndBury() {
  // Flush may close a connection (and so never adds to `dirty`).
  for (size_t i = 0; i < dirty.size(); ++i) {
    Connection* c = dirty[i];
    c->dirty = false;
    Flush(c);
  }
  dirty.clear();
  for (Connection* c : graveyard) delete c;
  graveyard.clear();
}

void H2Frontend::Loop::Shutdown() {
  // Every admitted call has been answered (Stop's requirement) and its
  // answer submitted by TakeMailbox: say GOAWAY and write what is queued,
  // for a bounded time.
  for (Connection* c : connections) {
    nghttp2_submit_goaway(c->session, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->session),
                          NGHTTP2_NO_ERROR, nullptr, 0);
    MarkDirty(c);
  }
  FlushDirtyAndBury();
  const Clock::time_point give_up = Clock::now() + kStopFlushTime;
  while (Clock::now() < give_up) {
    bool waiting = false;
    for (Connection* c : connections) waiting = waiting || c->want_epollout;
    if (!waiting) break;
    epoll_event events[64];
    const int n = epoll_wait(epoll_fd, events, 64, 50);
    for (int i = 0; i < n; ++i) {
      auto* c = static_cast<Connection*>(events[i].data.ptr);
      if (c == nullptr) {
        uint64_t count = 0;
        (void)!read(wake_fd, &count, sizeof(count));
      } else if (!c->closed && (events[i].events & EPOLLOUT)) {
        MarkDirty(c);
      }
    }
    FlushDirtyAndBury();
  }
  while (!connections.empty()) Close(*connections.begin(), "the server stopped");
  FlushDirtyAndBury();
  std::lock_guard<std::mutex> lock(mu);
  for (int fd : new_fds) close(fd);
  new_fds.clear();
}

void H2Frontend::Loop::Dispatch(Call* call) {
  Connection* c = call->connection;
  std::string body;
  body.swap(call->body);
  c->buffered_bytes -= static_cast<int64_t>(body.size());
  const ServerConfig& config = frontend->config_;
  if (!call->post || !call->grpc_content_type) return RespondHttp(call, call->post ? "415" : "405");
  if (call->method == Call::Method::kUnknown) {
    return ReplyError(call, kGrpcUnimplemented,
                      "method '" + call->path + "' is not served on h2_address (" + kRankPath + ", " + kModelInfoPath +
                          " and " + kHealthCheckPath + " are; the main gRPC port serves the rest)");
  }
  const bool rank = call->method == Call::Method::kRank;
  if (call->too_large) {
    const Status status = Status::ResourceExhausted(
        "request message larger than grpc_max_receive_message_bytes = " +
        std::to_string(config.grpc_max_receive_message_bytes) + " (or this connection holds more than " +
        std::to_string(kMaxBufferedBytesPerConnection) + " bytes of unfinished requests)");
    return rank ? RejectRank(call, status, "invalid_argument") : ReplyError(call, kGrpcResourceExhausted, status.message());
  }
  if (call->bad_timeout) {
    const Status status = Status::InvalidArgument("grpc-timeout header: not 1-8 digits and a unit (H M S m u n)");
    return rank ? RejectRank(call, status, "invalid_argument") : ReplyError(call, kGrpcInternal, status.message());
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(body.data());
  const size_t length = body.size() >= 5 ? (size_t{bytes[1]} << 24 | size_t{bytes[2]} << 16 |
                                            size_t{bytes[3]} << 8 | bytes[4])
                                         : 0;
  if (body.size() >= 5 && bytes[0] != 0) {
    return ReplyError(call, kGrpcUnimplemented,
                      "compressed requests are not supported on h2_address; send them uncompressed (or use the "
                      "main gRPC port)");
  }
  if (body.size() < 5 || length != body.size() - 5) {
    const Status status = Status::InvalidArgument("request body of " + std::to_string(body.size()) +
                                                  " bytes is not one gRPC length-prefixed message");
    return rank ? RejectRank(call, status, "invalid_argument") : ReplyError(call, kGrpcInternal, status.message());
  }
  switch (call->method) {
    case Call::Method::kRank:
      return DispatchRank(call, bytes + 5, length);
    case Call::Method::kModelInfo: {
      if (!frontend->service_->loaded()) return ReplyError(call, kGrpcUnavailable, "model is still loading");
      v1::ModelInfo info;
      frontend->service_->FillModelInfo(&info);
      return ReplyMessage(call, info);
    }
    case Call::Method::kHealthCheck: {
      std::string service;
      if (!ParseHealthCheckRequest(bytes + 5, length, &service)) {
        return ReplyError(call, kGrpcInternal, "request is not a grpc.health.v1.HealthCheckRequest");
      }
      if (!service.empty() && service != kRankerServiceName) {
        return ReplyError(call, kGrpcNotFound, "unknown service '" + service + "'");
      }
      // HealthCheckResponse{status: SERVING (1) | NOT_SERVING (2)}, field 1 as a varint.
      const char status = frontend->service_->serving() ? 1 : 2;
      call->reply = std::string("\0\0\0\0\x02\x08", 6) + status;
      call->code = 0;
      return Respond(call);
    }
    case Call::Method::kUnknown:
      break;
  }
}

void H2Frontend::Loop::DispatchRank(Call* call, const uint8_t* message, size_t size) {
  if (!call->request.ParseFromArray(message, static_cast<int>(size))) {
    return RejectRank(call, Status::InvalidArgument("request: not a valid jagrank.v1.RankRequest message"),
                      "invalid_argument");
  }
  Clock::time_point deadline = Clock::time_point::max();
  if (call->has_timeout && call->timeout < std::chrono::hours(24 * 365)) deadline = call->headers_at + call->timeout;
  RankerService* service = frontend->service_;
  auto is_cancelled = [call] { return call->cancelled.load(std::memory_order_relaxed); };
  // On an executor thread: builds the answer, then hands the call back to its loop.
  auto done = [call, service](const Status& status, const float* scores, int64_t count) {
    if (status.ok()) {
      v1::RankResponse response;
      FillRankResponse(call->request, service->model_version(), scores, count, &response);
      FrameMessage(response, &call->reply);
      call->code = 0;
    } else {
      const grpc::Status g = ToGrpcStatus(status, call->request.request_id());
      call->code = g.error_code();
      call->message = g.error_message();
    }
    Loop* loop = call->loop;
    loop->Post([&] { loop->done.push_back(call); });
  };
  const Status admitted = service->Admit(&call->request, Clock::now(), deadline, std::move(is_cancelled), std::move(done));
  if (!admitted.ok()) {
    const grpc::Status g = ToGrpcStatus(admitted, call->request.request_id());
    return ReplyError(call, g.error_code(), g.error_message());
  }
  call->queued = true;
}

void H2Frontend::Loop::RejectRank(Call* call, const Status& status, const char* reason) {
  ServerMetrics* metrics = frontend->metrics_;
  metrics->OnRejected(reason);
  metrics->OnRequestDone(StatusCodeName(status.code()), 0, SecondsSince(call->headers_at));
  const grpc::Status g = ToGrpcStatus(status, "");
  ReplyError(call, g.error_code(), g.error_message());
}

void H2Frontend::Loop::ReplyMessage(Call* call, const google::protobuf::MessageLite& message) {
  FrameMessage(message, &call->reply);
  call->code = 0;
  Respond(call);
}

void H2Frontend::Loop::ReplyError(Call* call, int code, const std::string& message) {
  call->code = code;
  call->message = message;
  Respond(call);
}

void H2Frontend::Loop::Respond(Call* call) {
  Connection* c = call->connection;
  call->responded = true;
  call->reply_started = Clock::now();
  int rc;
  if (call->code == 0) {
    const nghttp2_nv headers[] = {StaticHeader(":status", "200"), StaticHeader("content-type", "application/grpc")};
    nghttp2_data_provider body;
    body.source.ptr = call;
    body.read_callback = &H2ServerCallbacks::ReadReply;
    rc = nghttp2_submit_response(c->session, call->stream_id, headers, 2, &body);
  } else {
    // Trailers-only: one HEADERS frame that ends the stream.
    const std::string code = std::to_string(call->code);
    const std::string message = PercentEncode(call->message);
    const nghttp2_nv headers[] = {StaticHeader(":status", "200"), StaticHeader("content-type", "application/grpc"),
                                  CopiedHeader("grpc-status", code), CopiedHeader("grpc-message", message)};
    rc = nghttp2_submit_response(c->session, call->stream_id, headers, 4, nullptr);
  }
  if (rc != 0) {
    spdlog::debug("h2 front end: stream {}: cannot submit the answer: {}", call->stream_id, nghttp2_strerror(rc));
    nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, call->stream_id, NGHTTP2_INTERNAL_ERROR);
  }
  MarkDirty(c);
}

void H2Frontend::Loop::RespondHttp(Call* call, const char* http_status) {
  Connection* c = call->connection;
  call->responded = true;
  call->reply_started = Clock::now();
  const nghttp2_nv headers[] = {StaticHeader(":status", http_status)};
  if (nghttp2_submit_response(c->session, call->stream_id, headers, 1, nullptr) != 0) {
    nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, call->stream_id, NGHTTP2_INTERNAL_ERROR);
  }
  MarkDirty(c);
}

}  // namespace jagrank
