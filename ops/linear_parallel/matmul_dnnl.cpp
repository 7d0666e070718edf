// Matmul over oneDNN's matmul primitive (see matmul.h). Built when CMake finds libdnnl; this file
// is compiled with OpenMP, the threading runtime of Debian's oneDNN, so that the thread count of
// each product can be set on the thread that runs it.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <dnnl.hpp>
#include <exception>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "collops/reduce.h"
#include "collops/status.h"
#include "ops/linear_parallel/dnnl_runtime.h"
#include "ops/linear_parallel/matmul.h"

namespace collops {
namespace {

using dnnl::memory;
using dnnl_runtime::CpuEngine;
using dnnl_runtime::CreationMutex;
using dnnl_runtime::ScopedOmpThreads;
using dnnl_runtime::UsableThreads;

memory::data_type DnnlType(DataType dtype) {
  switch (dtype) {
    case ACL_FLOAT16:
      return memory::data_type::f16;
    case ACL_BF16:
      return memory::data_type::bf16;
    case ACL_FLOAT:
      return memory::data_type::f32;
    default:
      Fail(ERROR_INVALID_TENSOR_DTYPE, "matmul: no product of ", DataTypeName(dtype),
           " (float16, bfloat16, float32)");
  }
}

constexpr uint64_t AlignUp(uint64_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

struct Matmul::Impl {
  DataType dtype;
  int64_t k;
  int64_t n;
  bool transWeight;
  memory::data_type computeType;  // the inputs' type as oneDNN multiplies them
  bool widens;
  bool writesDtype = false;      // oneDNN can write y in the inputs' dtype (not widened)
  const void* weight = nullptr;  // the bound weight, in computeType
  float* xWide = nullptr;        // widened rows of x (widens only)
  struct Entry {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul primitive;
  };
  // One primitive per row count (a chunk and the last one) and y dtype.
  std::map<std::pair<int64_t, memory::data_type>, Entry> primitives;
  // oneDNN's scratchpad, as large as the largest primitive's, from a page boundary (kScratchAlign
  // spare bytes in front), as oneDNN's own scratchpad is.
  std::vector<uint8_t> scratchpad;
  static constexpr size_t kScratchAlign = 4096;
  void* Scratchpad() {
    const auto at = reinterpret_cast<uintptr_t>(scratchpad.data());
    return scratchpad.data() + (kScratchAlign - at % kScratchAlign) % kScratchAlign;
  }

  memory::desc Src(int64_t rows) const { return memory::desc({rows, k}, computeType, {k, 1}); }
  memory::desc Weights() const {
    return transWeight ? memory::desc({k, n}, computeType, {1, k})
                       : memory::desc({k, n}, computeType, {n, 1});
  }
  memory::desc Dst(int64_t rows, memory::data_type type) const {
    return memory::desc({rows, n}, type, {n, 1});
  }
  dnnl::matmul::primitive_desc Describe(int64_t rows, memory::data_type dstType) const {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(Src(rows), Weights(), Dst(rows, dstType)), attr, CpuEngine());
  }
  Entry& For(int64_t rows, memory::data_type dstType) {
    const auto key = std::make_pair(rows, dstType);
    auto it = primitives.find(key);
    if (it == primitives.end()) {
      std::lock_guard<std::mutex> lock(CreationMutex());
      dnnl::matmul::primitive_desc pd = Describe(rows, dstType);
      const size_t bytes = pd.scratchpad_desc().get_size();
      if (bytes + kScratchAlign > scratchpad.size()) scratchpad.resize(bytes + kScratchAlign);
      it = primitives.emplace(key, Entry{pd, dnnl::matmul(pd)}).first;
    }
    return it->second;
  }
};

bool Matmul::Available() { return true; }
const char* Matmul::UnavailableReason() { return ""; }
int Matmul::CallerThreads() { return omp_get_max_threads(); }

Matmul::Matmul(DataType dtype, int64_t k, int64_t n, bool transWeight) : impl_(new Impl) {
  Impl& m = *impl_;
  m.dtype = dtype;
  m.k = k;
  m.n = n;
  m.transWeight = transWeight;
  m.computeType = DnnlType(dtype);
  m.widens = false;
  if (k == 0 || n == 0) return;  // nothing to multiply: Run writes zeros or nothing
  std::lock_guard<std::mutex> lock(CreationMutex());
  try {
    m.Describe(1, memory::data_type::f32);
  } catch (const dnnl::error&) {
    // No kernel for this input type on this CPU: multiply in float32 instead.
    m.computeType = memory::data_type::f32;
    m.widens = dtype != ACL_FLOAT;
    try {
      m.Describe(1, memory::data_type::f32);
    } catch (const dnnl::error& e) {
      dnnl_runtime::Fail("matmul", e);
    }
  }
  if (!m.widens && dtype != ACL_FLOAT) {
    try {
      m.Describe(1, m.computeType);
      m.writesDtype = true;
    } catch (const dnnl::error&) {
      // No kernel writing this dtype: RunInto is asked for float32 only.
    }
  }
}

Matmul::~Matmul() = default;

bool Matmul::Widens() const { return impl_->widens; }

uint64_t Matmul::ScratchBytes(int64_t maxRows) const {
  if (!impl_->widens) return 0;
  const uint64_t weight = static_cast<uint64_t>(impl_->k) * impl_->n * sizeof(float);
  return AlignUp(weight) + static_cast<uint64_t>(maxRows) * impl_->k * sizeof(float);
}

void Matmul::Bind(const void* weight, uint8_t* scratch, int threads) {
  Impl& m = *impl_;
  if (!m.widens) {
    m.weight = weight;
    return;
  }
  auto* wide = reinterpret_cast<float*>(scratch);
  const int64_t count = m.k * m.n;
  const int64_t block = 1 << 16;
  // Widening is exact; the blocks are independent, so the threads split them. An exception must
  // not leave an OpenMP region, so the first one is carried out of it.
  std::exception_ptr failure;
#pragma omp parallel for num_threads(UsableThreads(threads)) schedule(static)
  for (int64_t begin = 0; begin < count; begin += block) {
    try {
      ConvertToFloat32(m.dtype, static_cast<const uint8_t*>(weight) + begin * DataTypeSize(m.dtype),
                       wide + begin, static_cast<size_t>(std::min(block, count - begin)));
    } catch (...) {
#pragma omp critical(collops_matmul_bind)
      if (failure == nullptr) failure = std::current_exception();
    }
  }
  if (failure != nullptr) std::rethrow_exception(failure);
  m.weight = wide;
  m.xWide = reinterpret_cast<float*>(scratch + AlignUp(count * sizeof(float)));
}

void Matmul::Run(const void* x, int64_t rows, float* out, int threads) {
  RunInto(x, rows, out, ACL_FLOAT, threads);
}

bool Matmul::WritesDirectly(DataType outDtype) const {
  return outDtype == ACL_FLOAT || (outDtype == impl_->dtype && impl_->writesDtype);
}

void Matmul::RunInto(const void* x, int64_t rows, void* out, DataType outDtype, int threads) {
  Impl& m = *impl_;
  if (!WritesDirectly(outDtype))
    Fail(ERROR_INTERNAL_ERROR, "matmul: no direct ", DataTypeName(outDtype), " result of ",
         DataTypeName(m.dtype), " products");
  if (rows == 0 || m.n == 0) return;
  if (m.k == 0) {
    std::memset(out, 0, static_cast<size_t>(rows * m.n) * DataTypeSize(outDtype));
    return;
  }
  const void* src = x;
  if (m.widens) {
    ConvertToFloat32(m.dtype, x, m.xWide, static_cast<size_t>(rows * m.k));
    src = m.xWide;
  }
  const memory::data_type dstType = DnnlType(outDtype);
  try {
    ScopedOmpThreads scoped(threads);
    Impl::Entry& entry = m.For(rows, dstType);
    dnnl::stream stream(CpuEngine());
    memory srcMem(m.Src(rows), CpuEngine(), const_cast<void*>(src));
    memory weightMem(m.Weights(), CpuEngine(), const_cast<void*>(m.weight));
    memory dstMem(m.Dst(rows, dstType), CpuEngine(), out);
    memory scratchMem(entry.pd.scratchpad_desc(), CpuEngine(), m.Scratchpad());
    entry.primitive.execute(stream, {{DNNL_ARG_SRC, srcMem},
                                     {DNNL_ARG_WEIGHTS, weightMem},
                                     {DNNL_ARG_DST, dstMem},
                                     {DNNL_ARG_SCRATCHPAD, scratchMem}});
    stream.wait();
  } catch (const dnnl::error& e) {
    dnnl_runtime::Fail("matmul", e);
  }
}

std::string Matmul::Implementation(int64_t rows, DataType outDtype) {
  if (impl_->k == 0 || impl_->n == 0 || rows == 0) return "none (empty product)";
  try {
    return impl_->For(rows, DnnlType(outDtype)).pd.impl_info_str();
  } catch (const dnnl::error& e) {
    dnnl_runtime::Fail("matmul", e);
  }
}

}  // namespace collops
