// make_cuda_device for builds without the CUDA toolkit: always null, with the reason. The real
// factory lives under harness/device/cuda/ and is compiled only when SB_HAVE_CUDA is set.
#ifndef SB_HAVE_CUDA
#include "harness/device/device.h"

namespace sb {

std::unique_ptr<Device> make_cuda_device(int /*local_rank*/, std::string* why) {
  if (why != nullptr) *why = "built without CUDA";
  return nullptr;
}

}  // namespace sb
#endif  // SB_HAVE_CUDA
