#include "common/flags.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace jagrank {
namespace {

Status BadValue(const std::string& name, const std::string& value, const char* want) {
  return Status::InvalidArgument("flag --" + name + "='" + value + "': expected " + want);
}

}  // namespace

void FlagParser::Add(const std::string& name, std::string* target, const std::string& help) {
  flags_[name] = {[target](const std::string& v) {
                    *target = v;
                    return Status::Ok();
                  },
                  help, *target, false};
}

void FlagParser::Add(const std::string& name, int64_t* target, const std::string& help) {
  flags_[name] = {[target, name](const std::string& v) {
                    char* end = nullptr;
                    errno = 0;
                    const long long x = std::strtoll(v.c_str(), &end, 10);
                    if (v.empty() || *end != '\0' || errno != 0) return BadValue(name, v, "an integer");
                    *target = x;
                    return Status::Ok();
                  },
                  help, std::to_string(*target), false};
}

void FlagParser::Add(const std::string& name, int* target, const std::string& help) {
  flags_[name] = {[target, name](const std::string& v) {
                    char* end = nullptr;
                    errno = 0;
                    const long x = std::strtol(v.c_str(), &end, 10);
                    if (v.empty() || *end != '\0' || errno != 0 || x < INT32_MIN || x > INT32_MAX) {
                      return BadValue(name, v, "a 32-bit integer");
                    }
                    *target = static_cast<int>(x);
                    return Status::Ok();
                  },
                  help, std::to_string(*target), false};
}

void FlagParser::Add(const std::string& name, double* target, const std::string& help) {
  std::ostringstream d;
  d << *target;
  flags_[name] = {[target, name](const std::string& v) {
                    char* end = nullptr;
                    const double x = std::strtod(v.c_str(), &end);
                    if (v.empty() || *end != '\0') return BadValue(name, v, "a number");
                    *target = x;
                    return Status::Ok();
                  },
                  help, d.str(), false};
}

void FlagParser::Add(const std::string& name, bool* target, const std::string& help) {
  flags_[name] = {[target, name](const std::string& v) {
                    if (v == "true" || v == "1") {
                      *target = true;
                    } else if (v == "false" || v == "0") {
                      *target = false;
                    } else {
                      return BadValue(name, v, "true or false");
                    }
                    return Status::Ok();
                  },
                  help, *target ? "true" : "false", true};
}

Status FlagParser::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) return Status::InvalidArgument("unexpected argument '" + arg + "' (see --help)");
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = flags_.find(name);
    if (it == flags_.end()) return Status::InvalidArgument("unknown flag --" + name + " (see --help)");
    if (!has_value) {
      if (it->second.is_bool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return Status::InvalidArgument("flag --" + name + " needs a value");
      }
    }
    RETURN_IF_ERROR(it->second.set(value));
    set_.insert(name);
  }
  return Status::Ok();
}

std::string FlagParser::Usage() const {
  std::ostringstream s;
  s << summary_ << "\n\nflags:\n";
  for (const auto& [name, flag] : flags_) {
    s << "  --" << name << "  " << flag.help;
    if (!flag.default_value.empty()) s << " (default: " << flag.default_value << ")";
    s << "\n";
  }
  return s.str();
}

}  // namespace jagrank
