// jagrank-export-model: writes the deterministic random model of a config
// (the one the server builds when it has no weights file) to a safetensors
// file, plus the config it belongs to as YAML beside it.
//
//   jagrank-export-model --output model.safetensors [--model-config config/model.yaml] [--seed N]
//     -> model.safetensors, model.yaml; prints the version (content hash).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace {

void Usage() {
  std::fprintf(stderr,
               "usage: jagrank-export-model --output PATH.safetensors [--model-config PATH.yaml] [--seed N]\n"
               "Writes the deterministic random model of the config (default: the embedded\n"
               "config/model.yaml) to PATH.safetensors and its config to PATH.yaml.\n");
}

int Fail(const jagrank::Status& s) {
  std::fprintf(stderr, "jagrank-export-model: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string output, config_path, seed_text;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    bool ok = true;
    if (arg == "--output" || arg == "-o") {
      ok = value(&output);
    } else if (arg == "--model-config") {
      ok = value(&config_path);
    } else if (arg == "--seed") {
      ok = value(&seed_text);
    } else if (arg == "--help" || arg == "-h") {
      Usage();
      return 0;
    } else {
      ok = false;
    }
    if (!ok) {
      Usage();
      return 2;
    }
  }
  if (output.empty()) {
    Usage();
    return 2;
  }
  jagrank::ModelConfig config;
  jagrank::Status s =
      config_path.empty() ? jagrank::DefaultModelConfig(&config) : jagrank::LoadModelConfig(config_path, &config);
  if (!s.ok()) return Fail(s);
  if (!seed_text.empty()) {
    char* end = nullptr;
    config.seed = std::strtoull(seed_text.c_str(), &end, 10);
    if (*end != '\0') return Fail(jagrank::Status::InvalidArgument("--seed '" + seed_text + "': not an integer"));
  }
  jagrank::ModelWeights weights;
  s = jagrank::MakeRandomWeights(config, &weights);
  if (!s.ok()) return Fail(s);
  s = jagrank::WriteSafetensors(output, weights,
                                {{"format", "pt"}, {"jagrank_model", config.name}, {"jagrank_version", weights.version()}});
  if (!s.ok()) return Fail(s);
  std::string yaml_path = output;
  const size_t dot = yaml_path.rfind(".safetensors");
  if (dot != std::string::npos && dot + 12 == yaml_path.size()) yaml_path.resize(dot);
  yaml_path += ".yaml";
  std::ofstream yaml(yaml_path, std::ios::trunc);
  yaml << ModelConfigToYaml(config);
  if (!yaml.flush()) return Fail(jagrank::Status::Internal("cannot write '" + yaml_path + "'"));
  std::printf("wrote %s (%lld bytes of weights) and %s; version %s\n", output.c_str(),
              static_cast<long long>(weights.total_bytes()), yaml_path.c_str(), weights.version().c_str());
  return 0;
}
