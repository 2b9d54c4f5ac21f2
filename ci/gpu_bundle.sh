#!/usr/bin/env bash
# Builds the GPU check's programs here and packs them, with the libraries a GPU machine's image
# lacks, into one archive that the device tool carries: the GPU machines lent to this project
# have CUDA, cuBLAS and NCCL (toolkit and pip wheels) but no OpenMPI, OpenBLAS, fmt, GTest, and
# no package registry. Here: Debian 12 with CUDA 13 under /usr/local/cuda.
#
#   ci/gpu_bundle.sh [ARCHIVE]        default .gpu_bundle/sb-gpu.tar.xz (git-ignored)
#   then, on the device:  ci/gpu_check.sh --bundle .gpu_bundle/sb-gpu.tar.xz OUTDIR
#
# Contents: bin/ shardbench and sb_cuda_tests (sm_80 + sm_90 kernels, -march=x86-64-v3 host
# code, so they run on any AVX2 x86-64 host), lib/ every shared library they or OpenMPI's
# components load except glibc's and CUDA's own, and mpi/ OpenMPI's components and help files,
# found there through OPAL_PREFIX and friends (set by gpu_check.sh), and python/ Debian's
# jsonschema for results/validate.py. glibc >= 2.36 is assumed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ARCHIVE="${1:-.gpu_bundle/sb-gpu.tar.xz}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
./ci/setup.sh
[ -x /usr/local/cuda/bin/nvcc ] ||
  { echo "gpu_bundle: no CUDA toolkit under /usr/local/cuda" >&2; exit 1; }
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSB_MARCH=x86-64-v3 \
  -DSB_ENABLE_CUDA=ON | grep 'CUDA/NCCL backend ON' ||
  { echo "gpu_bundle: CMake did not enable the CUDA/NCCL backend" >&2; exit 1; }
cmake --build "$BUILD_DIR" -j"${JOBS:-$(nproc)}" --target shardbench sb_cuda_tests

STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE"/{bin,lib,mpi/bin,mpi/etc,mpi/lib/openmpi3,mpi/share/openmpi,python}
cp "$BUILD_DIR/shardbench" "$BUILD_DIR/sb_cuda_tests" "$STAGE/bin/"
strip "$STAGE"/bin/*

MPI_LIBDIR=/usr/lib/x86_64-linux-gnu/openmpi/lib
cp -a "$MPI_LIBDIR"/openmpi3/*.so "$STAGE/mpi/lib/openmpi3/"
cp -a /usr/share/openmpi/help-*.txt "$STAGE/mpi/share/openmpi/"
cp /usr/bin/orted "$(readlink -f /usr/bin/mpirun)" "$STAGE/mpi/bin/"
ln -sf "$(basename "$(readlink -f /usr/bin/mpirun)")" "$STAGE/mpi/bin/mpirun"

# Every library those load, by soname, except glibc's (the host's must be used) and CUDA's
# (the GPU machine's driver, toolkit and NCCL are the ones to use).
glibc='linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil'
cuda='libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia'
skip="^($glibc|$cuda)[.-]"
for f in "$STAGE"/bin/* "$STAGE"/mpi/bin/* "$STAGE"/mpi/lib/openmpi3/*.so; do
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  [[ "$soname" =~ $skip ]] && continue
  cp -L "$path" "$STAGE/lib/$soname"
done
# results/validate.py's schema check: Debian's pure-Python jsonschema and its dependencies
# (pyrsistent falls back to Python where its C extension does not match the interpreter).
for m in jsonschema attr attrs pyrsistent; do
  cp -a "/usr/lib/python3/dist-packages/$m" "$STAGE/python/"
done
missing=$(for f in "$STAGE"/bin/* "$STAGE"/mpi/bin/*; do ldd "$f" | grep 'not found' || true; done)
[ -z "$missing" ] || { echo "gpu_bundle: unresolved libraries: $missing" >&2; exit 1; }
{
  echo "built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "nvcc: $(/usr/local/cuda/bin/nvcc --version | tail -1)"
  (cd "$STAGE" && find . -type f | sort)
} >"$STAGE/MANIFEST"
mkdir -p "$(dirname "$ARCHIVE")"
tar -C "$STAGE" -cJf "$ARCHIVE.tmp" . && mv "$ARCHIVE.tmp" "$ARCHIVE"
echo "gpu_bundle: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1); unpacked $(du -sh "$STAGE" | cut -f1))"
