// FlagParser: the small --name=value / --name value parser shared by
// jagrank-server, jagrank-client and jagrank-loadgen.
#ifndef JAGRANK_COMMON_FLAGS_H_
#define JAGRANK_COMMON_FLAGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace jagrank {

class FlagParser {
 public:
  explicit FlagParser(std::string program_summary) : summary_(std::move(program_summary)) {}

  // Registers --name; the target keeps its value unless the flag is given.
  // Targets must outlive Parse.
  void Add(const std::string& name, std::string* target, const std::string& help);
  void Add(const std::string& name, int64_t* target, const std::string& help);
  void Add(const std::string& name, int* target, const std::string& help);
  void Add(const std::string& name, double* target, const std::string& help);
  // A bool flag: --name, --name=true|false|1|0.
  void Add(const std::string& name, bool* target, const std::string& help);

  // Parses argv[1..]; an unknown flag, a missing or malformed value is an
  // INVALID_ARGUMENT naming the flag. --help sets help_requested().
  Status Parse(int argc, char** argv);
  bool IsSet(const std::string& name) const { return set_.count(name) > 0; }
  bool help_requested() const { return help_; }
  std::string Usage() const;

 private:
  struct Flag {
    std::function<Status(const std::string&)> set;
    std::string help;
    std::string default_value;
    bool is_bool = false;
  };
  std::string summary_;
  std::map<std::string, Flag> flags_;
  std::set<std::string> set_;
  bool help_ = false;
};

}  // namespace jagrank

#endif  // JAGRANK_COMMON_FLAGS_H_
