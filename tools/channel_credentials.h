// The channel credentials jagrank-client and jagrank-loadgen share: plaintext,
// TLS (--tls-ca: the CA bundle the server's certificate must chain to) or
// mTLS (also --tls-cert and --tls-key: the client's own certificate).
#ifndef JAGRANK_TOOLS_CHANNEL_CREDENTIALS_H_
#define JAGRANK_TOOLS_CHANNEL_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "common/status.h"

namespace jagrank {

// The whole of `path`, or an error naming `flag` and the file.
inline Status ReadPemFlag(const char* flag, const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(std::string(flag) + ": cannot open '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  *out = text.str();
  if (out->find("-----BEGIN ") == std::string::npos) {
    return Status::InvalidArgument(std::string(flag) + ": '" + path + "' holds no PEM block");
  }
  return Status::Ok();
}

// Insecure when `ca` is empty; otherwise TLS verified against `ca`, with
// the client certificate `cert` and key `key` when given (both or neither).
inline Status MakeChannelCredentials(const std::string& ca, const std::string& cert, const std::string& key,
                                     std::shared_ptr<grpc::ChannelCredentials>* out) {
  if (cert.empty() != key.empty()) return Status::InvalidArgument("--tls-cert and --tls-key: give both or neither");
  if (ca.empty()) {
    if (!cert.empty()) return Status::InvalidArgument("--tls-cert needs --tls-ca (the server's CA)");
    *out = grpc::InsecureChannelCredentials();
    return Status::Ok();
  }
  grpc::SslCredentialsOptions options;
  RETURN_IF_ERROR(ReadPemFlag("--tls-ca", ca, &options.pem_root_certs));
  if (!cert.empty()) {
    RETURN_IF_ERROR(ReadPemFlag("--tls-cert", cert, &options.pem_cert_chain));
    RETURN_IF_ERROR(ReadPemFlag("--tls-key", key, &options.pem_private_key));
  }
  *out = grpc::SslCredentials(options);
  return Status::Ok();
}

}  // namespace jagrank

#endif  // JAGRANK_TOOLS_CHANNEL_CREDENTIALS_H_
