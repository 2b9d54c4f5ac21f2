// cuBLAS is opened on first use (harness/device/cuda/cublas_api.h), not linked: the command
// starts without it, and the loader finds the library and every entry point the device calls.
// Needs no GPU: opening the library and naming a status touch no device. That shardbench does
// not list libcublas among the libraries it needs is checked on the binary (tests/cli/test_cli.py).
#include <gtest/gtest.h>

#include <string>

#ifdef SB_HAVE_CUDA
#include "harness/device/cuda/cublas_api.h"
#endif

namespace sb {
namespace {

#ifdef SB_HAVE_CUDA

TEST(CublasApi, OpensTheLibraryAndEveryEntryPoint) {
  const CublasApi& api = cublas_api();
  EXPECT_NE(api.create, nullptr);
  EXPECT_NE(api.destroy, nullptr);
  EXPECT_NE(api.set_stream, nullptr);
  EXPECT_NE(api.gemm_ex, nullptr);
  EXPECT_NE(api.gemm_strided_batched_ex, nullptr);
  EXPECT_EQ(std::string(api.status_name(CUBLAS_STATUS_SUCCESS)), "CUBLAS_STATUS_SUCCESS");
  EXPECT_EQ(&cublas_api(), &api);  // once per process
}

#endif  // SB_HAVE_CUDA

}  // namespace
}  // namespace sb
