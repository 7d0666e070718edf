// QuantMatmul over oneDNN's int8 matmul primitive (see quant_matmul.h).
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "collops/status.h"
#include "ops/linear_parallel/dnnl_runtime.h"
#include "ops/linear_parallel/quant_matmul.h"

namespace collops {
namespace {

using dnnl::memory;
using dnnl_runtime::CpuEngine;

}  // namespace

struct QuantMatmul::Impl {
  Shape shape;
  const int8_t* weight = nullptr;
  const int32_t* bias = nullptr;
  const float* scale = nullptr;
  struct Entry {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul primitive;
  };
  std::map<int64_t, Entry> byRows;  // one primitive per row count (a chunk and the last one)

  memory::desc Src(int64_t rows) const {
    return memory::desc({rows, shape.k}, memory::data_type::s8, {shape.k, 1});
  }
  /// The weight as stored: the products read it there, every call (nothing of it is kept).
  memory::desc Weights() const {
    const int64_t k = shape.k, n = shape.n;
    return shape.transWeight ? memory::desc({k, n}, memory::data_type::s8, {1, k})
                             : memory::desc({k, n}, memory::data_type::s8, {n, 1});
  }
  memory::desc Bias() const {
    return memory::desc({1, shape.n}, memory::data_type::s32, {shape.n, 1});
  }
  /// The int32 sums land in the float32 output's own bytes, which the scaling rewrites in place.
  memory::desc Dst(int64_t rows) const {
    return memory::desc({rows, shape.n}, memory::data_type::s32, {shape.n, 1});
  }
  dnnl::matmul::primitive_desc Describe(int64_t rows) const {
    // The weight in its stored layout, which oneDNN's brgemm kernels (VNNI dot products) copy
    // as they go: a layout of oneDNN's choice ("any") would need the whole weight reordered into
    // it first, a pass costing many times the product at small m (docs/performance.md). The scales
    // are applied after (Run), as oneDNN 2.6's brgemm takes no runtime scales. Its "gemm:jit"
    // kernels are skipped even where they would run: their kernel table is filled once through a
    // std::call_once whose helper symbol a torch process binds to torch's own bundled oneDNN,
    // which then fills torch's table instead, and the product comes out as zeros. Without
    // brgemm (no AVX512-VNNI) the reference kernel runs.
    const dnnl::matmul::desc desc =
        shape.hasBias ? dnnl::matmul::desc(Src(rows), Weights(), Bias(), Dst(rows))
                      : dnnl::matmul::desc(Src(rows), Weights(), Dst(rows));
    dnnl::matmul::primitive_desc pd(desc, CpuEngine());
    const dnnl::matmul::primitive_desc first = pd;
    while (std::string(pd.impl_info_str()).rfind("gemm:", 0) == 0) {
      if (!pd.next_impl()) return first;
    }
    return pd;
  }
  Entry& For(int64_t rows) {
    auto it = byRows.find(rows);
    if (it == byRows.end()) {
      std::lock_guard<std::mutex> lock(dnnl_runtime::CreationMutex());
      dnnl::matmul::primitive_desc pd = Describe(rows);
      it = byRows.emplace(rows, Entry{pd, dnnl::matmul(pd)}).first;
    }
    return it->second;
  }
};

QuantMatmul::QuantMatmul(const Shape& shape) : impl_(new Impl) {
  impl_->shape = shape;
  if (shape.k == 0 || shape.n == 0) return;  // no product: Run computes the rest itself
  try {
    std::lock_guard<std::mutex> lock(dnnl_runtime::CreationMutex());
    impl_->Describe(1);
  } catch (const dnnl::error& e) {
    dnnl_runtime::Fail("int8 matmul", e);
  }
}

QuantMatmul::~QuantMatmul() = default;

const QuantMatmul::Shape& QuantMatmul::shape() const { return impl_->shape; }

void QuantMatmul::Bind(const int8_t* weight, const int32_t* bias, const float* scale) {
  impl_->weight = weight;
  impl_->bias = bias;
  impl_->scale = scale;
}

void QuantMatmul::Run(const int8_t* x, int64_t rows, const float* tokenScale, float* out,
                      int threads) {
  Impl& m = *impl_;
  const Shape& s = m.shape;
  if (rows == 0 || s.n == 0) return;
  if (s.k == 0) {
    // An empty sum: y is the bias, scaled (no product to run).
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        const float acc = m.bias != nullptr ? static_cast<float>(m.bias[j]) : 0.0f;
        const float scaled = acc * m.scale[s.perChannel ? j : 0];
        out[i * s.n + j] = s.perToken ? scaled * tokenScale[i] : scaled;
      }
    }
    return;
  }
  try {
    dnnl_runtime::ScopedOmpThreads scoped(threads);
    Impl::Entry& entry = m.For(rows);
    dnnl::stream stream(CpuEngine());
    memory src(m.Src(rows), CpuEngine(), const_cast<int8_t*>(x));
    memory weights(m.Weights(), CpuEngine(), const_cast<int8_t*>(m.weight));
    memory dst(m.Dst(rows), CpuEngine(), out);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
    if (s.hasBias) {
      args.emplace(DNNL_ARG_BIAS, memory(m.Bias(), CpuEngine(), const_cast<int32_t*>(m.bias)));
    }
    entry.primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    dnnl_runtime::Fail("int8 matmul", e);
  }
  // Each int32 sum becomes float32 times its column's (or the one) scale and its row's scale,
  // in place: an int32 and a float32 have the same size.
  const auto* sums = reinterpret_cast<const int32_t*>(out);
  const int64_t n = s.n;
  for (int64_t i = 0; i < rows; ++i) {
    const float row = s.perToken ? tokenScale[i] : 1.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float scale = m.scale[s.perChannel ? j : 0];
      out[i * n + j] = static_cast<float>(sums[i * n + j]) * scale * row;
    }
  }
}

std::string QuantMatmul::Implementation(int64_t rows) {
  if (impl_->shape.k == 0 || impl_->shape.n == 0 || rows == 0) return "none (empty product)";
  try {
    return impl_->For(rows).pd.impl_info_str();
  } catch (const dnnl::error& e) {
    dnnl_runtime::Fail("int8 matmul", e);
  }
}

}  // namespace collops
