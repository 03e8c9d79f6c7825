// Shared by the libFuzzer targets in fuzz/: the tiny model every target
// builds, and a check that aborts with a message (libFuzzer then keeps the
// input as a crash).
#ifndef JAGRANK_FUZZ_FUZZ_UTIL_H_
#define JAGRANK_FUZZ_FUZZ_UTIL_H_

#include <cstdio>
#include <cstdlib>

#include "model/config.h"

namespace jagrank {
namespace fuzz {

// d = 8, two pooled features, histories kept up to 8: a forward pass takes
// microseconds, so the fuzzers spend their time on the input handling.
inline ModelConfig TinyModelConfig() {
  ModelConfig c;
  c.name = "fuzz-tiny";
  c.embedding_dim = 8;
  c.num_dense_features = 4;
  c.sparse_features = {{"country", 10}, {"segments", 20}};
  c.item_rows = 16;
  c.max_history_len = 8;
  c.attention_heads = 2;
  c.bottom_mlp = {8};
  c.top_mlp = {8, 1};
  c.seed = 3;
  return c;
}

}  // namespace fuzz
}  // namespace jagrank

// Not assert(): fuzz builds may define NDEBUG.
#define FUZZ_CHECK(cond, ...)                                            \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s: ", #cond);            \
      std::fprintf(stderr, __VA_ARGS__);                                 \
      std::fprintf(stderr, "\n");                                        \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

#endif  // JAGRANK_FUZZ_FUZZ_UTIL_H_
