// Embedding lookups (parameters in embedding_params.h): the CPU reference and
// backend, and the CUDA launchers when the build has CUDA.
#ifndef JAGRANK_KERNELS_EMBEDDING_EMBEDDING_H_
#define JAGRANK_KERNELS_EMBEDDING_EMBEDDING_H_

#include "common/status.h"
#include "kernels/embedding/embedding_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace jagrank {

// CPU reference and backend. InvalidArgument naming the field on bad input
// (null pointers where data is needed, batch < 0, dim <= 0, num_rows <= 0,
// offsets not starting at 0 or decreasing, a history longer than max_len).
Status EmbeddingBagCpu(const EmbeddingBagParams& params);
Status GatherRowsCpu(const GatherRowsParams& params);
Status HistoryGatherCpu(const HistoryGatherParams& params);

#if JAGRANK_WITH_CUDA
// CUDA launchers (conventions: kernels/cuda_ops.h; device pointers, work
// enqueued on `stream`, device-side offsets and ids not read on the host).

// Embedding bag sum, fp32 or bf16 table, fp32 out, float accumulation.
// One thread per output element, ids of a bag summed in order (the CPU order).
// H200: 4096 bags, 264k ids, d = 64, bf16 table of 1M rows: 0.10 ms, 358 GB/s
// of rows + ids: latency-bound (one row load in flight per thread).
Status EmbeddingBagCuda(const EmbeddingBagParams& params, cudaStream_t stream);

// `count` bag sums (one per pooled feature), each as EmbeddingBagCuda's, in
// one launch per kMaxBagsPerLaunch of them when they share table dtype and
// dim (else one launch each): the bags' dependent id -> row loads overlap
// instead of running launch after launch (26 features, 128 requests on the
// H200: 26 launches took 200 us).
Status EmbeddingBagsCuda(const EmbeddingBagParams* bags, int count, cudaStream_t stream);

// Candidate embeddings e_c = table[row(ids[c])] as fp32.
Status GatherRowsCuda(const GatherRowsParams& params, cudaStream_t stream);

// h_j = E_item[row(id_j)] + P[L-1-j]. REQUIRES every len(b) <= max_len
// (tokens beyond max_len are not written).
Status HistoryGatherCuda(const HistoryGatherParams& params, cudaStream_t stream);
#endif  // JAGRANK_WITH_CUDA

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_EMBEDDING_EMBEDDING_H_
