/* jagrank C ABI: the jagged kernels on raw device pointers and a CUDA stream,
 * for callers outside C++ (PyTorch through ctypes, other languages).
 * Library: libjagrank_kernels_c.so (CMake target jagrank_kernels_c, built
 * when the build has CUDA); it exports only the jagrank_* functions below.
 *
 * Conventions:
 *   - Every pointer argument is a device pointer, except the return value of
 *     jagrank_last_error. Jagged tensors are values + offsets (int32, batch+1
 *     entries, offsets[0] = 0, non-decreasing), on the device; they are not
 *     read on the host, so the max_* bounds must be passed in and be correct.
 *   - `stream` is a cudaStream_t (NULL = the legacy default stream), e.g.
 *     torch.cuda.current_stream().cuda_stream. Calls only enqueue work:
 *     synchronise the stream before reading the outputs.
 *   - Every function returns JAGRANK_OK (0) or an error code; the message of
 *     the last failed call on the calling thread is jagrank_last_error().
 *   - dtype: JAGRANK_DTYPE_FLOAT32 or JAGRANK_DTYPE_BFLOAT16. Accumulation is
 *     float32. bf16 attention operands need 16-byte aligned base pointers.
 *   - Empty tensors: a data pointer may be NULL (as PyTorch's data_ptr() is
 *     for an empty tensor) where nothing is read or written through it.
 *     Offsets live on the device, so the library cannot see the token count;
 *     "nothing to read" is what batch and the max_* bounds say:
 *       batch = 0: every pointer may be NULL but the table;
 *       embedding bag: ids when every bag is empty;
 *       self-attention: q, k, v, o when max_len = 0 (no tokens);
 *       target attention: q and o when max_candidates = 0; z when
 *       max_candidates = 0 or max_history_len = 0.
 *     Offsets arrays may be NULL only when batch = 0 (a batch of empty
 *     sequences still has batch + 1 offsets). Pass the true maxima (0 when
 *     every sequence is empty); a NULL pointer that would be read is
 *     JAGRANK_ERROR_INVALID_ARGUMENT with the argument's name ("q is null").
 *   - Thread-safe: no global state besides the per-thread error message.
 *
 * Python (ctypes) sketch:
 *   lib = ctypes.CDLL("build/lib/libjagrank_kernels_c.so")
 *   rc = lib.jagrank_embedding_bag(ids.data_ptr(), offsets.data_ptr(), B,
 *            table.data_ptr(), JAGRANK_DTYPE_BFLOAT16, ctypes.c_int64(rows), d,
 *            out.data_ptr(), torch.cuda.current_stream().cuda_stream)
 *   (declare argtypes: c_void_p for pointers and the stream, c_int32/c_int64/c_float)
 *   if rc: raise RuntimeError(lib.jagrank_last_error().decode())
 */
#ifndef JAGRANK_KERNELS_C_API_JAGRANK_C_H_
#define JAGRANK_KERNELS_C_API_JAGRANK_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define JAGRANK_C_EXPORT __attribute__((visibility("default")))
#else
#define JAGRANK_C_EXPORT
#endif

/* Bumped when a signature below changes. */
#define JAGRANK_C_API_VERSION 2

/* Return codes (they mirror jagrank::Status::Code). */
enum {
  JAGRANK_OK = 0,
  JAGRANK_ERROR_INVALID_ARGUMENT = 1, /* bad size, null pointer, bad dtype: the message names the argument */
  JAGRANK_ERROR_NOT_FOUND = 2,
  JAGRANK_ERROR_RESOURCE_EXHAUSTED = 3,
  JAGRANK_ERROR_DEADLINE_EXCEEDED = 4,
  JAGRANK_ERROR_UNAVAILABLE = 5,
  JAGRANK_ERROR_CANCELLED = 6,
  JAGRANK_ERROR_UNIMPLEMENTED = 7, /* e.g. a head_dim the CUDA kernels are not built for */
  JAGRANK_ERROR_INTERNAL = 8       /* a CUDA call or launch failed */
};

/* Element types. */
enum { JAGRANK_DTYPE_FLOAT32 = 0, JAGRANK_DTYPE_BFLOAT16 = 1 };

/* JAGRANK_C_API_VERSION of the library (check it against the header's). */
JAGRANK_C_EXPORT int jagrank_c_api_version(void);

/* Message of the last failed call on this thread ("" if none failed yet).
 * Valid until the next jagrank_* call on this thread. Never NULL. */
JAGRANK_C_EXPORT const char* jagrank_last_error(void);

/* Embedding-bag sum: out[b, :] = sum of table[uint64(ids[i]) % num_rows, :]
 * over i in [offsets[b], offsets[b+1]); empty bag -> zeros.
 *   ids [offsets[batch]] int64, offsets [batch+1] int32,
 *   table [num_rows, dim] of table_dtype, out [batch, dim] float32. */
JAGRANK_C_EXPORT int jagrank_embedding_bag(const int64_t* ids, const int32_t* offsets, int32_t batch,
                                           const void* table, int32_t table_dtype, int64_t num_rows,
                                           int32_t dim, float* out, struct CUstream_st* stream);

/* Jagged multi-head self-attention, no mask: for sequence b (tokens
 * offsets[b] .. offsets[b+1]-1), head h, o = softmax(scale q k^T) v.
 *   q, k, v, o: [T, num_heads, head_dim] of dtype, contiguous (row stride
 *   num_heads * head_dim), T = offsets[batch]; max_len >= every length;
 *   softmax_scale usually 1/sqrt(head_dim). head_dim 32, 64 or 128.
 *   total_len: T (q.shape[0]) where the caller knows it, 0 if not. A hint:
 *   the kernel's launch schedule follows the batch's fill (T over
 *   batch * max_len); every value gives the same output. */
JAGRANK_C_EXPORT int jagrank_jagged_self_attention(const void* q, const void* k, const void* v, void* o,
                                                   int32_t dtype, const int32_t* offsets, int32_t batch,
                                                   int32_t num_heads, int32_t head_dim, int32_t max_len,
                                                   int64_t total_len, float softmax_scale,
                                                   struct CUstream_st* stream);

/* Jagged target attention, one head: candidate c of request b attends over
 * b's history: o[c] = sum_j softmax_j(scale q[c] . z[j]) z[j]; a request with
 * an empty history gives zero rows.
 *   q, o: [C, dim] of dtype, contiguous, jagged over candidate_offsets [batch+1];
 *   z: [T, dim] of dtype (keys = values), jagged over history_offsets [batch+1];
 *   max_candidates / max_history_len bound the per-request lengths;
 *   softmax_scale usually 1/sqrt(dim). dim 32, 64 or 128.
 *   total_candidates: C where the caller knows it, 0 if not; a hint like
 *   self-attention's total_len. */
JAGRANK_C_EXPORT int jagrank_jagged_target_attention(const void* q, const int32_t* candidate_offsets,
                                                     int32_t max_candidates, int64_t total_candidates,
                                                     const void* z,
                                                     const int32_t* history_offsets, int32_t max_history_len,
                                                     int32_t batch, int32_t dim, int32_t dtype,
                                                     float softmax_scale, void* o, struct CUstream_st* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* JAGRANK_KERNELS_C_API_JAGRANK_C_H_ */
