// Check macros for the CUDA runtime, cuBLAS and NCCL: a failing call prints
// "[rank r] file:line: <api> error <name>: <text> in <expr>" and aborts the whole job through
// sb::fatal (MPI_Abort once the runtime installed its hook). They never return an error code.
#pragma once

#include <cuda_runtime_api.h>

#include "harness/common/check.h"
#include "harness/device/cuda/cublas_api.h"

#define SB_CUDA_CHECK(expr)                                                             \
  do {                                                                                  \
    cudaError_t sb_cuda_err_ = (expr);                                                  \
    if (sb_cuda_err_ != cudaSuccess) {                                                  \
      ::sb::fatal(__FILE__, __LINE__,                                                   \
                  std::string("CUDA error ") + cudaGetErrorName(sb_cuda_err_) + ": " +  \
                      cudaGetErrorString(sb_cuda_err_) + " in " #expr);                 \
    }                                                                                   \
  } while (0)

// After a kernel launch: catches bad launch configurations (asynchronous faults surface at
// the next synchronising call, which is checked too).
#define SB_CUDA_CHECK_LAUNCH() SB_CUDA_CHECK(cudaGetLastError())

#define SB_CUBLAS_CHECK(expr)                                                              \
  do {                                                                                     \
    cublasStatus_t sb_cublas_st_ = (expr);                                                 \
    if (sb_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                          \
      ::sb::fatal(__FILE__, __LINE__,                                                      \
                  std::string("cuBLAS error ") +                                          \
                      ::sb::cublas_api().status_name(sb_cublas_st_) + ": " +              \
                      ::sb::cublas_api().status_string(sb_cublas_st_) + " in " #expr);    \
    }                                                                                      \
  } while (0)
