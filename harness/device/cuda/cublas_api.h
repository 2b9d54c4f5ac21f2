// cuBLAS, opened on first use (dlopen) instead of linked. Linking it costs every process that
// starts, CUDA or not, its libraries' load-time set-up: an empty program linked to
// libcublas.so.13 takes 0.38 s to start against 0.00 s unlinked (CUDA 13, this 2-core
// machine), and a CPU run starts a launcher and one process per rank, a `predict` one, the test
// suite thousands. Only a CudaDevice opens it. The functions are the few the device calls.
#pragma once

#include <cublas_v2.h>

namespace sb {

struct CublasApi {
  // the C entry points (cublas_api.h also declares C++ overloads with a cudaDataType compute
  // type, which the library does not export)
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                    int, int, const void*, const void*, cudaDataType, int,
                                    const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  using GemmStridedBatchedEx = cublasStatus_t (*)(
      cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
      const void*, cudaDataType, int, long long, const void*, cudaDataType, int, long long,
      const void*, void*, cudaDataType, int, long long, int, cublasComputeType_t,
      cublasGemmAlgo_t);
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  GemmEx gemm_ex;
  GemmStridedBatchedEx gemm_strided_batched_ex;
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
};

// Opens libcublas once per process; a missing library or symbol is sb::fatal naming it.
const CublasApi& cublas_api();

}  // namespace sb
