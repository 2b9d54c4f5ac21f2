// Lazy cuBLAS (see header): the library by its soname (the executable's RUNPATH, which holds
// the CUDA toolkit's library directory it was linked against, LD_LIBRARY_PATH, ld.so.cache),
// then at the toolkit's path known at build time.
#include "harness/device/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

#include "harness/common/check.h"

namespace sb {
namespace {

// The pointer types are the library's own: selecting each C entry point by them compiles only
// when they match its declaration.
[[maybe_unused]] constexpr CublasApi::GemmEx kGemmEx = &cublasGemmEx;
[[maybe_unused]] constexpr CublasApi::GemmStridedBatchedEx kGemmStridedBatchedEx =
    &cublasGemmStridedBatchedEx;

void* open_cublas() {
  for (const char* name : {SB_CUBLAS_SONAME, SB_CUBLAS_PATH})
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
  fatal(__FILE__, __LINE__,
        std::string("cuBLAS: cannot open " SB_CUBLAS_SONAME " (nor " SB_CUBLAS_PATH "): ") +
            dlerror());
}

template <typename F>
void bind(void* lib, F& f, const char* symbol) {
  f = reinterpret_cast<F>(dlsym(lib, symbol));
  if (f == nullptr)
    fatal(__FILE__, __LINE__, std::string("cuBLAS: no symbol ") + symbol + " in " SB_CUBLAS_SONAME);
}

CublasApi load() {
  void* lib = open_cublas();  // kept open for the process: the handles outlive any scope
  CublasApi api{};
  bind(lib, api.create, "cublasCreate_v2");
  bind(lib, api.destroy, "cublasDestroy_v2");
  bind(lib, api.set_stream, "cublasSetStream_v2");
  bind(lib, api.gemm_ex, "cublasGemmEx");
  bind(lib, api.gemm_strided_batched_ex, "cublasGemmStridedBatchedEx");
  bind(lib, api.status_name, "cublasGetStatusName");
  bind(lib, api.status_string, "cublasGetStatusString");
  return api;
}

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = load();  // thread-safe, once
  return api;
}

}  // namespace sb
