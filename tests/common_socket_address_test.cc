#include "common/socket_address.h"

#include <gtest/gtest.h>

#include <string>

namespace jagrank {
namespace {

TEST(SocketAddressTest, HostAndPort) {
  SocketAddress a;
  ASSERT_TRUE(ParseSocketAddress("grpc_address", "0.0.0.0:8500", &a).ok());
  EXPECT_FALSE(a.is_unix);
  EXPECT_EQ(a.host, "0.0.0.0");
  EXPECT_EQ(a.port, 8500);
  ASSERT_TRUE(ParseSocketAddress("grpc_address", "[::1]:0", &a).ok());
  EXPECT_EQ(a.host, "::1");
  EXPECT_EQ(a.port, 0);
  ASSERT_TRUE(ParseSocketAddress("grpc_address", ":9100", &a).ok());
  EXPECT_EQ(a.host, "");
  EXPECT_EQ(a.port, 9100);
}

TEST(SocketAddressTest, UnixPath) {
  SocketAddress a;
  ASSERT_TRUE(ParseSocketAddress("grpc_address", "unix:/tmp/x.sock", &a).ok());
  EXPECT_TRUE(a.is_unix);
  EXPECT_EQ(a.unix_path, "/tmp/x.sock");
}

TEST(SocketAddressTest, ErrorsNameTheFieldAndTheAddress) {
  SocketAddress a;
  for (const std::string bad : {"8500", "host:", "host:port", "host:70000", "host:-1", "unix:", "host:+80"}) {
    const Status s = ParseSocketAddress("metrics_address", bad, &a);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("metrics_address '" + bad + "'"), std::string::npos) << s.message();
  }
  const Status s = ParseSocketAddress("grpc_address", "unix:/" + std::string(200, 'a'), &a);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("longer than"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace jagrank
