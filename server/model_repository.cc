#include "server/model_repository.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace jagrank {
namespace {

// False when `path` is not a regular file; else its size and mtime.
bool StatFile(const std::string& path, std::string* fingerprint) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  *fingerprint = std::to_string(st.st_size) + "@" + std::to_string(mtime_ns);
  return true;
}

}  // namespace

bool ParseRepositoryVersion(const std::string& name, int64_t* version) {
  if (name.empty() || name.size() > 18 || name[0] == '0') return false;  // 18 digits always fit int64
  int64_t v = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *version = v;
  return true;
}

Status ListModelRepository(const std::string& dir, std::vector<RepositoryVersion>* out) {
  out->clear();
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return Status::NotFound("model repository '" + dir + "' cannot be read: " + std::strerror(errno));
  }
  while (const dirent* entry = ::readdir(d)) {
    RepositoryVersion v;
    if (!ParseRepositoryVersion(entry->d_name, &v.version)) continue;
    const std::string version_dir = dir + "/" + entry->d_name;
    v.config_path = version_dir + "/" + kRepositoryConfigFile;
    v.weights_path = version_dir + "/" + kRepositoryWeightsFile;
    std::string config_print, weights_print;
    if (!StatFile(v.config_path, &config_print) || !StatFile(v.weights_path, &weights_print)) continue;
    v.fingerprint = config_print + "," + weights_print;
    out->push_back(std::move(v));
  }
  ::closedir(d);
  std::sort(out->begin(), out->end(),
            [](const RepositoryVersion& a, const RepositoryVersion& b) { return a.version > b.version; });
  return Status::Ok();
}

}  // namespace jagrank
