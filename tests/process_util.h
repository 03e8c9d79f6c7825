// Helpers for tests that run the project's binaries as processes: run a
// shell command and capture its stdout, read a whole file.
#ifndef JAGRANK_TESTS_PROCESS_UTIL_H_
#define JAGRANK_TESTS_PROCESS_UTIL_H_

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace jagrank {
namespace testing {

// Runs `command` through the shell; returns its exit code (-1 if it did not
// exit normally) and fills *out with its stdout.
inline int RunCommand(const std::string& command, std::string* out) {
  out->clear();
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace testing
}  // namespace jagrank

#endif  // JAGRANK_TESTS_PROCESS_UTIL_H_
