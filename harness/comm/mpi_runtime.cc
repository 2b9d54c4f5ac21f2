// MPI process lifetime and discovery: MPI_Init_thread at MULTIPLE (a Communicator's two comm
// threads call MPI at once, each on communicators of its own; the main thread calls MPI only
// while no Communicator issues), the
// MPI_Abort hook behind SB_CHECK, the node map, and small main-thread helpers. No collectives of
// the workload run here; those go through a Communicator and its backend.
#include "harness/comm/mpi_runtime.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>

#include "harness/comm/watchdog.h"
#include "harness/common/check.h"

namespace sb {
namespace {
void mpi_abort_hook(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  SB_CHECK(!initialized, "MPI initialized twice");
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  set_abort_hook(&mpi_abort_hook);
  set_log_rank(rank());
  SB_CHECK(provided >= MPI_THREAD_MULTIPLE,
           "MPI provides thread level " << provided
                                        << "; the two comm streams need MPI_THREAD_MULTIPLE");
  // Errors on the communicators we use abort the job with MPI's message (the default too).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  Watchdog::Scope watch("MPI_Finalize");
  if (!finalized) MPI_Finalize();
  set_abort_hook(nullptr);
}

int MpiRuntime::world_size() const {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int MpiRuntime::rank() const {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

Topology MpiRuntime::topology(int ranks_per_node) const {
  const int n = world_size(), me = rank();
  SB_CHECK(ranks_per_node >= 0, "--ranks-per-node must be >= 0, got " << ranks_per_node);
  if (ranks_per_node > 0) return Topology::virtual_nodes(n, me, ranks_per_node);
  MPI_Comm shm;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &shm);
  int leader = me;
  // after this all-reduce every rank of a shared-memory node knows the node's lowest world rank
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shm);
  MPI_Comm_free(&shm);
  std::vector<int> leaders(n);
  // after this all-gather every rank knows the node leader of every rank
  MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> ids = leaders;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<int> node_of(n);
  for (int r = 0; r < n; ++r)
    node_of[r] = int(std::lower_bound(ids.begin(), ids.end(), leaders[r]) - ids.begin());
  return Topology(n, me, std::move(node_of));
}

std::string MpiRuntime::library_version() const {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, size_t(std::max(len, 0)));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

namespace {
// One scalar reduced over the world; after this all-reduce every rank holds the result.
template <class T>
T reduce_scalar(T v, MPI_Datatype type, MPI_Op op, const char* what) {
  Watchdog::Scope watch(std::string(what) + " over ranks (MPI_Allreduce on the world) on the main thread");
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, type, op, MPI_COMM_WORLD);
  return v;
}
}  // namespace

double MpiRuntime::max_over_ranks(double v) const {
  return reduce_scalar(v, MPI_DOUBLE, MPI_MAX, "max");
}
double MpiRuntime::sum_over_ranks(double v) const {
  return reduce_scalar(v, MPI_DOUBLE, MPI_SUM, "sum");
}
uint64_t MpiRuntime::max_over_ranks_u64(uint64_t v) const {
  return reduce_scalar(v, MPI_UINT64_T, MPI_MAX, "max");
}
uint64_t MpiRuntime::sum_over_ranks_u64(uint64_t v) const {
  return reduce_scalar(v, MPI_UINT64_T, MPI_SUM, "sum");
}

std::vector<double> MpiRuntime::gather_to_root(double v) const {
  Watchdog::Scope watch("gather to rank 0 (MPI_Gather on the world) on the main thread");
  const bool root = rank() == 0;
  std::vector<double> all(root ? size_t(world_size()) : 0);
  // after this gather rank 0 holds every rank's value, in rank order
  MPI_Gather(&v, 1, MPI_DOUBLE, root ? all.data() : nullptr, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return all;
}

std::vector<std::string> MpiRuntime::gather_strings_to_root(const std::string& s) const {
  Watchdog::Scope watch("string gather to rank 0 (MPI_Gatherv on the world) on the main thread");
  const bool root = rank() == 0;
  const int n = world_size();
  SB_CHECK(s.size() < (size_t(1) << 31), "string gather: " << s.size() << " bytes exceeds 2 GiB");
  const int len = int(s.size());
  std::vector<int> lens(root ? size_t(n) : 0), offsets(lens.size());
  // after this gather rank 0 knows every rank's length
  MPI_Gather(&len, 1, MPI_INT, root ? lens.data() : nullptr, 1, MPI_INT, 0, MPI_COMM_WORLD);
  int64_t total = 0;
  for (size_t r = 0; r < lens.size(); ++r) {
    SB_CHECK(total + lens[r] < (int64_t(1) << 31), "string gather: more than 2 GiB in all");
    offsets[r] = int(total);
    total += lens[r];
  }
  std::string all(size_t(total), '\0');
  // after this gather rank 0 holds every rank's string, back to back in rank order
  MPI_Gatherv(s.data(), len, MPI_CHAR, root ? all.data() : nullptr, lens.data(), offsets.data(),
              MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (size_t r = 0; r < lens.size(); ++r)
    out.push_back(all.substr(size_t(offsets[r]), size_t(lens[r])));
  return out;
}

void MpiRuntime::barrier() const {
  Watchdog::Scope watch("barrier (MPI_Barrier on the world) on the main thread");
  // after this barrier every rank has reached the same point
  MPI_Barrier(MPI_COMM_WORLD);
}

void MpiRuntime::broadcast_string(std::string& s, int root) const {
  Watchdog::Scope watch("string broadcast (MPI_Bcast on the world) on the main thread");
  uint64_t len = s.size();
  // after these broadcasts every rank holds root's string
  MPI_Bcast(&len, 1, MPI_UINT64_T, root, MPI_COMM_WORLD);
  s.resize(size_t(len));
  for (uint64_t off = 0; off < len;) {
    const int piece = int(std::min<uint64_t>(len - off, uint64_t(1) << 30));
    MPI_Bcast(s.data() + off, piece, MPI_CHAR, root, MPI_COMM_WORLD);
    off += uint64_t(piece);
  }
}

void MpiRuntime::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace sb
