// A raw HTTP/2 client for the tests that must send what gRPC's own client
// never sends: headers of any value (a grpc-timeout of 2562048H), messages
// that declare more bytes than they carry, streams left open on purpose.
// Plain sockets; HPACK literals without Huffman coding on the way out; on
// the way in, frames are read whole and only their type, flags, stream and
// payload are looked at (no HPACK decoding). SETTINGS and PING are
// acknowledged as they are read. Not thread-safe.
#ifndef JAGRANK_TESTS_RAW_H2_CLIENT_H_
#define JAGRANK_TESTS_RAW_H2_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace jagrank {
namespace testing {

class RawH2Client {
 public:
  enum FrameType : uint8_t {
    kData = 0,
    kHeaders = 1,
    kRstStream = 3,
    kSettings = 4,
    kPing = 6,
    kGoaway = 7,
    kWindowUpdate = 8,
  };
  static constexpr uint8_t kEndStream = 0x1;
  static constexpr uint8_t kAck = 0x1;
  static constexpr uint8_t kEndHeaders = 0x4;

  struct Frame {
    uint8_t type = 0;
    uint8_t flags = 0;
    uint32_t stream = 0;
    std::string payload;
  };

  RawH2Client() = default;
  RawH2Client(const RawH2Client&) = delete;
  RawH2Client& operator=(const RawH2Client&) = delete;
  ~RawH2Client() { Close(); }

  // Connects to 127.0.0.1:`port` and sends the connection preface and an
  // empty SETTINGS frame. False when the connection fails.
  bool Connect(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return false;
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return false;
    return SendAll("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") && SendFrame(kSettings, 0, 0, "");
  }

  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  // Wakes a send or a read blocked on the socket in another thread (they
  // fail from then on); Close still frees it.
  void Shutdown() {
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
  }

  // HEADERS for a gRPC call of `path` on `stream` (odd, increasing), with
  // `extra` headers after the standard ones.
  bool SendRequestHeaders(uint32_t stream, const std::string& path,
                          const std::vector<std::pair<std::string, std::string>>& extra = {}) {
    std::string block;
    for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
             {":method", "POST"},
             {":scheme", "http"},
             {":path", path},
             {":authority", "localhost"},
             {"content-type", "application/grpc"},
             {"te", "trailers"}}) {
      AppendLiteral(name, value, &block);
    }
    for (const auto& [name, value] : extra) AppendLiteral(name, value, &block);
    return SendFrame(kHeaders, kEndHeaders, stream, block);
  }

  // The 5-byte gRPC message prefix: not compressed, `length` bytes follow.
  static std::string GrpcPrefix(uint32_t length) {
    std::string p(5, '\0');
    p[1] = static_cast<char>(length >> 24);
    p[2] = static_cast<char>(length >> 16);
    p[3] = static_cast<char>(length >> 8);
    p[4] = static_cast<char>(length);
    return p;
  }

  // DATA frames of at most 16384 bytes (the default SETTINGS_MAX_FRAME_SIZE);
  // `end_stream` on the last.
  bool SendData(uint32_t stream, const std::string& bytes, bool end_stream) {
    size_t at = 0;
    do {
      const size_t n = std::min<size_t>(16384, bytes.size() - at);
      const bool last = at + n == bytes.size();
      if (!SendFrame(kData, last && end_stream ? kEndStream : 0, stream, bytes.substr(at, n))) return false;
      at += n;
    } while (at < bytes.size());
    return true;
  }

  bool SendFrame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload) {
    std::string f(9, '\0');
    f[0] = static_cast<char>(payload.size() >> 16);
    f[1] = static_cast<char>(payload.size() >> 8);
    f[2] = static_cast<char>(payload.size());
    f[3] = static_cast<char>(type);
    f[4] = static_cast<char>(flags);
    f[5] = static_cast<char>((stream >> 24) & 0x7f);
    f[6] = static_cast<char>(stream >> 16);
    f[7] = static_cast<char>(stream >> 8);
    f[8] = static_cast<char>(stream);
    return SendAll(f + payload);
  }

  // Reads the next frame, waiting until `give_up`. SETTINGS and PING are
  // acknowledged (and still returned). False on timeout or a closed socket.
  bool ReadFrame(Frame* frame, std::chrono::steady_clock::time_point give_up) {
    while (buffer_.size() < 9 || buffer_.size() < 9 + PayloadLength()) {
      if (!Receive(give_up)) return false;
    }
    const size_t length = PayloadLength();
    frame->type = static_cast<uint8_t>(buffer_[3]);
    frame->flags = static_cast<uint8_t>(buffer_[4]);
    frame->stream = (static_cast<uint32_t>(static_cast<uint8_t>(buffer_[5]) & 0x7f) << 24) |
                    (static_cast<uint32_t>(static_cast<uint8_t>(buffer_[6])) << 16) |
                    (static_cast<uint32_t>(static_cast<uint8_t>(buffer_[7])) << 8) |
                    static_cast<uint32_t>(static_cast<uint8_t>(buffer_[8]));
    frame->payload = buffer_.substr(9, length);
    buffer_.erase(0, 9 + length);
    if (frame->type == kSettings && !(frame->flags & kAck)) SendFrame(kSettings, kAck, 0, "");
    if (frame->type == kPing && !(frame->flags & kAck)) SendFrame(kPing, kAck, 0, frame->payload);
    return true;
  }

  // Reads frames until a DATA frame on `stream` carries a whole gRPC message
  // (returned without its prefix), or until the stream ends or `give_up`.
  bool ReadMessage(uint32_t stream, std::string* message, std::chrono::steady_clock::time_point give_up) {
    std::string data;
    Frame frame;
    while (ReadFrame(&frame, give_up)) {
      if (frame.stream != stream) continue;
      if (frame.type == kData) {
        data += frame.payload;
        if (data.size() >= 5) {
          const uint32_t length = (static_cast<uint32_t>(static_cast<uint8_t>(data[1])) << 24) |
                                  (static_cast<uint32_t>(static_cast<uint8_t>(data[2])) << 16) |
                                  (static_cast<uint32_t>(static_cast<uint8_t>(data[3])) << 8) |
                                  static_cast<uint32_t>(static_cast<uint8_t>(data[4]));
          if (data.size() >= 5 + length) {
            *message = data.substr(5, length);
            return true;
          }
        }
      }
      if (frame.type == kRstStream || (frame.flags & kEndStream)) return false;
    }
    return false;
  }

  int fd() const { return fd_; }

 private:
  size_t PayloadLength() const {
    return (static_cast<size_t>(static_cast<uint8_t>(buffer_[0])) << 16) |
           (static_cast<size_t>(static_cast<uint8_t>(buffer_[1])) << 8) |
           static_cast<size_t>(static_cast<uint8_t>(buffer_[2]));
  }

  // Waits for bytes until `give_up` (a time already past: one look without waiting).
  bool Receive(std::chrono::steady_clock::time_point give_up) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count()))) <= 0) return false;
    char chunk[65536];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  bool SendAll(const std::string& bytes) {
    size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    return true;
  }

  // HPACK integer with an N-bit prefix (RFC 7541 5.1) after `first_bits`.
  static void AppendInteger(uint8_t first_bits, int prefix_bits, size_t value, std::string* out) {
    const size_t max_prefix = (size_t{1} << prefix_bits) - 1;
    if (value < max_prefix) {
      out->push_back(static_cast<char>(first_bits | value));
      return;
    }
    out->push_back(static_cast<char>(first_bits | max_prefix));
    value -= max_prefix;
    while (value >= 128) {
      out->push_back(static_cast<char>(0x80 | (value & 0x7f)));
      value >>= 7;
    }
    out->push_back(static_cast<char>(value));
  }

  // "Literal Header Field without Indexing, New Name", no Huffman coding.
  static void AppendLiteral(const std::string& name, const std::string& value, std::string* out) {
    out->push_back('\0');
    AppendInteger(0, 7, name.size(), out);
    *out += name;
    AppendInteger(0, 7, value.size(), out);
    *out += value;
  }

  int fd_ = -1;
  std::string buffer_;
};

}  // namespace testing
}  // namespace jagrank

#endif  // JAGRANK_TESTS_RAW_H2_CLIENT_H_
