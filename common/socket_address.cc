#include "common/socket_address.h"

#include <sys/un.h>

#include <cstdlib>

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

}  // namespace jagrank
