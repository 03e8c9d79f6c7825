// The safetensors loader on hostile files: the bytes become a file (an
// anonymous memory file, so nothing touches the disk) that LoadSafetensors
// maps and checks against the tiny model's config. Accepted weights must
// satisfy ValidateWeights, every tensor's values must be readable, and a CPU
// model built from them must answer one score per candidate (the values may
// be anything the file holds, NaN included).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "model/batch.h"
#include "model/model.h"
#include "model/weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace jagrank;
  static const ModelConfig config = fuzz::TinyModelConfig();
  const int fd = memfd_create("fuzz_safetensors", MFD_CLOEXEC);
  FUZZ_CHECK(fd >= 0, "memfd_create failed");
  size_t written = 0;
  while (written < size) {
    const ssize_t n = write(fd, data + written, size - written);
    FUZZ_CHECK(n > 0, "write to the memory file failed");
    written += static_cast<size_t>(n);
  }
  ModelWeights weights;
  const Status loaded = LoadSafetensors("/proc/self/fd/" + std::to_string(fd), config, &weights);
  close(fd);  // the loader's mapping (if any) keeps the data
  if (!loaded.ok()) {
    FUZZ_CHECK(!loaded.message().empty(), "error without a message");
    return 0;
  }
  FUZZ_CHECK(ValidateWeights(config, weights).ok(), "accepted weights do not match the config");
  volatile float sink = 0;
  for (const auto& kv : weights.tensors()) {
    const WeightTensor& t = kv.second;
    float sum = 0;
    for (int64_t i = 0; i < t.num_elements(); ++i) sum += t.data[i];
    sink = sink + sum;
  }
  (void)sink;

  std::unique_ptr<Model> model;
  ModelOptions options;
  options.device = "cpu";
  options.cpu_threads = 1;
  const Status created = Model::Create(config, std::move(weights), options, &model);
  FUZZ_CHECK(created.ok(), "accepted weights refused by the model: %s", created.ToString().c_str());
  RankInput input;
  input.dense = {0.5f, -1.0f, 2.0f, 0.0f};
  input.sparse = {{1, 2}, {3}};
  input.history = {3, 4, 5};
  input.candidates = {7, 8, 9};
  Batch batch;
  FUZZ_CHECK(AssembleBatch({&input}, config, &batch).ok(), "batch assembly");
  std::vector<float> scores;
  const Status forward = model->Forward(batch, &scores);
  FUZZ_CHECK(forward.ok() && scores.size() == input.candidates.size(), "forward: %s, %zu scores",
             forward.ToString().c_str(), scores.size());
  return 0;
}
