// Every CUDA launcher of kernels/, one include. Each family declares its own
// launchers beside its CPU functions (kernels/<family>/<family>.h); this
// header only gathers them and states what they share.
//
// Conventions of the CUDA launchers: each takes the family's params struct
// (kernels/<family>/<family>_params.h) by const reference, with every
// pointer on the device, and enqueues its work on `stream`; nothing is
// synchronised.
//
// Errors: InvalidArgument naming the field for what the host can check
// (sizes, null pointers, dtypes); Internal for a failed CUDA/cuBLAS call or
// launch. Offsets, lengths and ids live on the device and are NOT read by the
// launchers: REQUIRES they satisfy the family's contract (the same one the CPU
// function checks). The kernels stay in bounds where they can (lengths are
// clamped to max_len), but the result of breaking a REQUIRES is unspecified.
//
// cuBLAS / cuBLASLt handles: one per (calling thread, device), created on the
// first call that needs one and kept until the process exits.
#ifndef JAGRANK_KERNELS_CUDA_OPS_H_
#define JAGRANK_KERNELS_CUDA_OPS_H_

#include "kernels/attention/attention.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embedding/embedding.h"
#include "kernels/interaction/interaction.h"
#include "kernels/layout/layout.h"
#include "kernels/linear/linear.h"

#endif  // JAGRANK_KERNELS_CUDA_OPS_H_
