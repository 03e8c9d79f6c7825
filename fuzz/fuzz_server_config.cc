// The server YAML loader (ParseServerConfig) on arbitrary text. An accepted
// config must pass ValidateServerConfig and summarise.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "server/server_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace jagrank;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ServerConfig config;
  const Status parsed = ParseServerConfig(text, &config);
  if (!parsed.ok()) {
    FUZZ_CHECK(!parsed.message().empty(), "error without a message");
    return 0;
  }
  const Status valid = ValidateServerConfig(config);
  FUZZ_CHECK(valid.ok(), "accepted config does not validate: %s", valid.ToString().c_str());
  FUZZ_CHECK(!ServerConfigSummary(config).empty(), "empty summary");
  return 0;
}
