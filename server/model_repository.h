// A model repository on disk, in the Triton / TF Serving layout:
//
//   DIR/<version>/model.yaml          the model config (model/config.h)
//   DIR/<version>/model.safetensors   its weights (model/weights.h)
//
// <version> is a positive integer written in decimal without a sign or
// leading zeros ("1", "2", "10"); other entries are ignored. A version is
// complete when both files are present; the server serves the highest
// complete version that loads (server/model_manager.h). Publish a version by
// writing its directory elsewhere on the same file system and renaming it
// into DIR, so that no poll ever sees half a file; and never rewrite the
// files of a version being served (the CPU backend maps the weights file).
#ifndef JAGRANK_SERVER_MODEL_REPOSITORY_H_
#define JAGRANK_SERVER_MODEL_REPOSITORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace jagrank {

inline constexpr const char* kRepositoryConfigFile = "model.yaml";
inline constexpr const char* kRepositoryWeightsFile = "model.safetensors";

// One complete version directory.
struct RepositoryVersion {
  int64_t version = 0;
  std::string config_path;   // DIR/<version>/model.yaml
  std::string weights_path;  // DIR/<version>/model.safetensors
  // Size and modification time (ns) of both files: a version whose
  // fingerprint changed has new contents (a failed version is tried again
  // only then).
  std::string fingerprint;
};

// Parses a version directory's name: true and *version > 0 for "1", "42";
// false for "0", "01", "-3", "3a", "" and numbers past int64.
bool ParseRepositoryVersion(const std::string& name, int64_t* version);

// The complete versions of `dir`, highest first. Error (naming `dir`) when
// it cannot be read; an empty list when it holds no complete version.
Status ListModelRepository(const std::string& dir, std::vector<RepositoryVersion>* out);

}  // namespace jagrank

#endif  // JAGRANK_SERVER_MODEL_REPOSITORY_H_
