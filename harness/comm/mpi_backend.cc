// The MPI backends' factory and shared arithmetic. kRing (mpi_ring_backend.cc) counts every
// transfer; kMpiNative (mpi_native_backend.cc) uses the library's collectives, modelled.
#include "harness/comm/mpi_backend_base.h"
#include "harness/comm/mpi_runtime.h"

namespace sb {
namespace mpi_detail {

void sum_to(void* dst, const void* a, const void* b, size_t n, DType t) {
  if (t == DType::kF32) {
    auto* d = static_cast<float*>(dst);
    auto *x = static_cast<const float*>(a), *y = static_cast<const float*>(b);
    for (size_t k = 0; k < n; ++k) d[k] = x[k] + y[k];
  } else {
    auto* d = static_cast<uint16_t*>(dst);
    auto *x = static_cast<const uint16_t*>(a), *y = static_cast<const uint16_t*>(b);
    for (size_t k = 0; k < n; ++k) d[k] = f32_to_bf16(bf16_to_f32(x[k]) + bf16_to_f32(y[k]));
  }
}

void bf16_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  sum_to(inout, in, inout, size_t(*len), DType::kBF16);
}

}  // namespace mpi_detail

std::unique_ptr<CommBackend> make_mpi_backend(const Topology& topo, CollectiveImpl impl,
                                              size_t max_elems_per_call) {
  if (impl == CollectiveImpl::kRing) return mpi_detail::make_ring_backend(topo, max_elems_per_call);
  return mpi_detail::make_native_backend(topo, max_elems_per_call);
}

std::unique_ptr<CommBackend> make_mpi_backend(const Topology& topo, CollectiveImpl impl) {
  return make_mpi_backend(topo, impl, size_t(INT_MAX));
}

}  // namespace sb
