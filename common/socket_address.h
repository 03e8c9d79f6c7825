// The stream-socket addresses the binaries' flags and config keys take:
// "unix:/path" or "host:port" (host may be "[v6]"; empty = every interface
// when listening). One parser, so that every address setting accepts and
// refuses the same forms with the same message.
#ifndef JAGRANK_COMMON_SOCKET_ADDRESS_H_
#define JAGRANK_COMMON_SOCKET_ADDRESS_H_

#include <string>

#include "common/status.h"

namespace jagrank {

struct SocketAddress {
  bool is_unix = false;
  std::string unix_path;  // when is_unix
  std::string host;       // otherwise: brackets removed
  int port = 0;           // otherwise: 0..65535 (0 = any free port when listening)
};

// InvalidArgument naming `field` and `address` when `address` is neither
// form, its unix path is empty or longer than a sockaddr_un holds, or its
// port is not a number in 0..65535.
Status ParseSocketAddress(const std::string& field, const std::string& address, SocketAddress* out);

// Before listening on `address`: Unavailable "<field> '<address>': address
// already in use" when every local address it resolves to is bound by another
// socket (TCP; port 0 never is), or a server accepts connections on its unix
// socket path. Other failures are left to the listener to report. Tries a
// bind (SO_REUSEADDR, as gRPC's and the metrics exposer's listeners) or a
// connect, and closes the socket again.
Status CheckAddressFree(const std::string& field, const std::string& address);

}  // namespace jagrank

#endif  // JAGRANK_COMMON_SOCKET_ADDRESS_H_
