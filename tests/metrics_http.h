// Test helpers for the metrics tests: a minimal blocking HTTP/1.0 GET over a
// plain socket (bounded by a timeout) and a parser for the Prometheus text
// exposition format. Header-only; test code only.
#ifndef JAGRANK_TESTS_METRICS_HTTP_H_
#define JAGRANK_TESTS_METRICS_HTTP_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace jagrank {
namespace metrics_test {

struct HttpResponse {
  int status = 0;        // 0: no response (connect failed, timeout, garbage)
  std::string headers;   // raw header block, status line included
  std::string body;
};

// GET http://127.0.0.1:port<path>; gives up after `timeout`.
inline HttpResponse HttpGet(int port, const std::string& path,
                            std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  HttpResponse response;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return response;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return response;
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return response;
  }
  std::string raw;
  char buf[16384];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::close(fd);
      return response;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0) {
      ::close(fd);
      return response;
    }
    if (n == 0) break;  // server closed: the whole response is in
    raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t split = raw.find("\r\n\r\n");
  if (split == std::string::npos || raw.compare(0, 5, "HTTP/") != 0) return response;
  response.headers = raw.substr(0, split);
  response.body = raw.substr(split + 4);
  const size_t space = response.headers.find(' ');
  response.status = std::atoi(response.headers.c_str() + space + 1);
  return response;
}

// One line of the exposition: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses what prometheus-cpp writes (no escaped quotes in label values).
inline std::vector<Sample> ParseExposition(const std::string& text) {
  std::vector<Sample> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t pos = line.find_first_of("{ ");
    if (pos == std::string::npos) continue;
    s.name = line.substr(0, pos);
    if (line[pos] == '{') {
      const size_t close = line.find('}', pos);
      if (close == std::string::npos) continue;
      const std::string body = line.substr(pos + 1, close - pos - 1);
      size_t start = 0;
      while (start < body.size()) {
        const size_t eq = body.find('=', start);
        const size_t q1 = body.find('"', eq);
        const size_t q2 = body.find('"', q1 + 1);
        if (eq == std::string::npos || q1 == std::string::npos || q2 == std::string::npos) break;
        s.labels[body.substr(start, eq - start)] = body.substr(q1 + 1, q2 - q1 - 1);
        start = body.find(',', q2);
        if (start == std::string::npos) break;
        ++start;
      }
      pos = close + 1;
    }
    s.value = std::strtod(line.c_str() + pos, nullptr);
    samples.push_back(std::move(s));
  }
  return samples;
}

// The value of the sample `name` whose labels include `labels`; NaN if absent.
inline double Value(const std::vector<Sample>& samples, const std::string& name,
                    const std::map<std::string, std::string>& labels = {}) {
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& kv : labels) {
      auto it = s.labels.find(kv.first);
      if (it == s.labels.end() || it->second != kv.second) match = false;
    }
    if (match) return s.value;
  }
  return std::nan("");
}

// Sum over every sample called `name` (e.g. requests_total over all codes).
inline double SumOf(const std::vector<Sample>& samples, const std::string& name) {
  double sum = 0;
  for (const Sample& s : samples) {
    if (s.name == name) sum += s.value;
  }
  return sum;
}

// Cumulative count of histogram `name` at upper bound `le` (matched numerically).
inline double BucketCount(const std::vector<Sample>& samples, const std::string& name, double le) {
  for (const Sample& s : samples) {
    if (s.name != name + "_bucket") continue;
    auto it = s.labels.find("le");
    if (it == s.labels.end()) continue;
    const double bound = it->second == "+Inf" ? INFINITY : std::strtod(it->second.c_str(), nullptr);
    if (bound == le || (std::isfinite(le) && std::fabs(bound - le) <= 1e-9 * std::fabs(le))) return s.value;
  }
  return std::nan("");
}

// Histogram buckets in order of their bound: (le, cumulative count).
inline std::vector<std::pair<double, double>> Buckets(const std::vector<Sample>& samples, const std::string& name) {
  std::vector<std::pair<double, double>> out;
  for (const Sample& s : samples) {
    if (s.name != name + "_bucket") continue;
    const std::string& le = s.labels.at("le");
    out.emplace_back(le == "+Inf" ? INFINITY : std::strtod(le.c_str(), nullptr), s.value);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Metric family names present (histogram samples counted under their family).
inline std::set<std::string> FamilyNames(const std::vector<Sample>& samples) {
  std::set<std::string> names;
  for (const Sample& s : samples) {
    names.insert(s.name);
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string suf(suffix);
      if (s.name.size() > suf.size() && s.name.compare(s.name.size() - suf.size(), suf.size(), suf) == 0) {
        names.insert(s.name.substr(0, s.name.size() - suf.size()));
      }
    }
  }
  return names;
}

// docs/metrics.md's metric contract (prefix jagrank_).
inline const std::vector<std::string>& DesignMetricNames() {
  static const std::vector<std::string> names = {
      "jagrank_requests_total",          "jagrank_candidates_total",
      "jagrank_request_latency_seconds", "jagrank_queue_latency_seconds",
      "jagrank_compute_latency_seconds", "jagrank_batch_requests",
      "jagrank_batch_candidates",        "jagrank_batch_history_tokens",
      "jagrank_queue_depth",             "jagrank_inflight_requests",
      "jagrank_padding_saved_bytes_total", "jagrank_device_memory_used_bytes",
      "jagrank_device_memory_total_bytes", "jagrank_device_memory_peak_bytes",
      "jagrank_model_weights_bytes",     "jagrank_process_resident_memory_bytes"};
  return names;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Every jagrank_* identifier in `text` (e.g. a dashboard's PromQL), with
// histogram suffixes mapped to the family name.
inline std::set<std::string> MetricNamesIn(const std::string& text) {
  std::set<std::string> names;
  size_t pos = 0;
  while ((pos = text.find("jagrank_", pos)) != std::string::npos) {
    if (pos > 0 && (std::isalnum(static_cast<unsigned char>(text[pos - 1])) || text[pos - 1] == '_')) {
      pos += 8;
      continue;
    }
    size_t end = pos;
    while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) ++end;
    std::string name = text.substr(pos, end - pos);
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string suf(suffix);
      if (name.size() > suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0) {
        name.resize(name.size() - suf.size());
      }
    }
    names.insert(name);
    pos = end;
  }
  return names;
}

}  // namespace metrics_test
}  // namespace jagrank

#endif  // JAGRANK_TESTS_METRICS_HTTP_H_
