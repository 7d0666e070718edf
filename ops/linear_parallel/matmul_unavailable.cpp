// Matmul without oneDNN (CMake did not find libdnnl): LinearParallelOperation is still registered,
// so its params parse and its errors name the cause, but every product throws
// ERROR_BACKEND_UNAVAILABLE.
#include "collops/status.h"
#include "ops/linear_parallel/matmul.h"

namespace collops {

struct Matmul::Impl {};

bool Matmul::Available() { return false; }

const char* Matmul::UnavailableReason() {
  return "collops was built without oneDNN (CMake found no libdnnl; scripts/setup.sh installs "
         "Debian's libdnnl-dev), so LinearParallelOperation has no matrix product";
}

int Matmul::CallerThreads() { return 1; }

Matmul::Matmul(DataType, int64_t, int64_t, bool) {
  Fail(ERROR_BACKEND_UNAVAILABLE, UnavailableReason());
}

Matmul::~Matmul() = default;
bool Matmul::Widens() const { return false; }
uint64_t Matmul::ScratchBytes(int64_t) const { return 0; }
void Matmul::Bind(const void*, uint8_t*, int) {}
void Matmul::Run(const void*, int64_t, float*, int) {}
bool Matmul::WritesDirectly(DataType) const { return false; }
void Matmul::RunInto(const void*, int64_t, void*, DataType, int) {}
std::string Matmul::Implementation(int64_t, DataType) { return "none"; }

}  // namespace collops
