#include "common/socket_address.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace jagrank {

Status ParseSocketAddress(const std::string& field, const std::string& address, SocketAddress* out) {
  *out = SocketAddress();
  const std::string where = field + " '" + address + "'";
  if (address.rfind("unix:", 0) == 0) {
    const std::string path = address.substr(5);
    constexpr size_t kMaxPath = sizeof(sockaddr_un::sun_path) - 1;
    if (path.empty() || path.size() > kMaxPath) {
      return Status::InvalidArgument(where + ": the unix socket path is empty or longer than " +
                                     std::to_string(kMaxPath) + " bytes");
    }
    out->is_unix = true;
    out->unix_path = path;
    return Status::Ok();
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return Status::InvalidArgument(where + ": not host:port or unix:/path");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = address.substr(colon + 1);
  char* end = nullptr;
  const long value = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || port[0] == '-' || port[0] == '+' || value < 0 || value > 65535) {
    return Status::InvalidArgument(where + ": port '" + port + "' is not a number in 0..65535");
  }
  out->host = host;
  out->port = static_cast<int>(value);
  return Status::Ok();
}

Status CheckAddressFree(const std::string& field, const std::string& address) {
  SocketAddress parsed;
  RETURN_IF_ERROR(ParseSocketAddress(field, address, &parsed));
  const Status in_use = Status::Unavailable(field + " '" + address + "': address already in use");
  if (parsed.is_unix) {
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    std::memcpy(un.sun_path, parsed.unix_path.data(), parsed.unix_path.size());
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status::Ok();
    const bool answered = connect(fd, reinterpret_cast<const sockaddr*>(&un), sizeof(un)) == 0;
    close(fd);
    return answered ? in_use : Status::Ok();
  }
  if (parsed.port == 0) return Status::Ok();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(parsed.port);
  if (getaddrinfo(parsed.host.empty() ? nullptr : parsed.host.c_str(), port.c_str(), &hints, &found) != 0) {
    return Status::Ok();
  }
  bool all_in_use = found != nullptr;
  for (const addrinfo* a = found; a != nullptr && all_in_use; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      all_in_use = false;
      break;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 || errno != EADDRINUSE) all_in_use = false;
    close(fd);
  }
  freeaddrinfo(found);
  return all_in_use ? in_use : Status::Ok();
}

}  // namespace jagrank
