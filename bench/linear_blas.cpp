// collops-linear-blas: LinearParallelOperation's product against oneDNN called directly, in one
// run. Per dtype and m (x [m, k], weight [n, k]), each round times in turn:
//   onednn      oneDNN's matmul, x . weight^T -> float32 (what the op asks oneDNN for)
//   onednn_out  oneDNN's matmul with y in x's dtype (what a plain caller would ask for)
//   op_f32      LinearParallelOperation PURE_LINEAR, one rank, outDataType float32
//   op          the same with y in x's dtype (product, then the one rounding)
//   openblas    OpenBLAS's cblas_sgemm, x and the weight widened to float32 first (Debian's
//               OpenBLAS has no bfloat16 or float16 GEMM); only when built with OpenBLAS found
// and prints the median over rounds in ms with op ÷ onednn and op_f32 ÷ onednn. Threads: the
// OpenMP threads of this process (--threads, default 1: what each of 2 ranks gets on 2 CPUs).
//
//   collops-linear-blas                               # bf16, f32; m 16, 256, 2048; k = n = 4096
//   collops-linear-blas --dtypes bf16 --ms 256 --threads 2 --rounds 9
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dnnl.hpp>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/linear_bench_cli.h"
#include "collops/collops.h"
#include "collops/reduce.h"
#if defined(COLLOPS_BENCH_OPENBLAS)
#include <cblas.h>
#endif

namespace {

using collops::DataType;

struct Options : linear_bench::CommonOptions {
  std::vector<std::string> dtypes = {"bf16", "f32"};
};

const linear_bench::Cli kCli("collops-linear-blas",
                             "[--dtypes bf16,f16,f32] [--ms 16,256,2048] [-k 4096] [-n 4096] "
                             "[--threads 1] [--rounds 5]");

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) kCli.Fail(arg + " needs a value (or is unknown)");
    const std::string value = argv[++i];
    if (kCli.Common(arg, value, o)) continue;
    if (arg != "--dtypes") kCli.Fail("unknown option " + arg);
    o.dtypes = linear_bench::Cli::Split(value);
    for (const auto& d : o.dtypes) {
      if (d != "bf16" && d != "f16" && d != "f32") kCli.Fail("unknown dtype " + d);
    }
  }
  return o;
}

DataType AclType(const std::string& d) {
  return d == "bf16" ? collops::ACL_BF16 : d == "f16" ? collops::ACL_FLOAT16 : collops::ACL_FLOAT;
}

dnnl::memory::data_type DnnlType(DataType d) {
  return d == collops::ACL_BF16      ? dnnl::memory::data_type::bf16
         : d == collops::ACL_FLOAT16 ? dnnl::memory::data_type::f16
                                     : dnnl::memory::data_type::f32;
}

/// oneDNN's matmul x [m, k] . w^T (w [n, k]) -> y of `out`; null when oneDNN has no kernel.
std::function<void()> DirectMatmul(DataType in, DataType out, int64_t m, int64_t k, int64_t n,
                                   void* x, void* w, void* y) {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  using md = dnnl::memory::desc;
  const md src({m, k}, DnnlType(in), {k, 1}), wei({k, n}, DnnlType(in), {1, k}),
      dst({m, n}, DnnlType(out), {n, 1});
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), engine);
    auto prim = std::make_shared<dnnl::matmul>(pd);
    auto args = std::make_shared<std::unordered_map<int, dnnl::memory>>(
        std::unordered_map<int, dnnl::memory>{{DNNL_ARG_SRC, dnnl::memory(src, engine, x)},
                                              {DNNL_ARG_WEIGHTS, dnnl::memory(wei, engine, w)},
                                              {DNNL_ARG_DST, dnnl::memory(dst, engine, y)}});
    return [prim, args] {
      dnnl::stream s(engine);
      prim->execute(s, *args);
      s.wait();
    };
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

/// LinearParallelOperation PURE_LINEAR on one thread rank, y of `out`.
std::function<void()> OpMatmul(DataType in, DataType out, int64_t m, int64_t k, int64_t n, void* x,
                               void* w, void* y) {
  auto op = std::make_shared<collops::OperationPtr>(
      collops::MakeOperation("LinearParallelOperation", {{"rank", 0},
                                                         {"rankSize", 1},
                                                         {"commMode", 1},
                                                         {"commDomain", "linear-blas"},
                                                         {"type", 3},
                                                         {"outDataType", static_cast<int>(out)}}));
  using linear_bench::TensorOver;
  auto pack = std::make_shared<collops::VariantPack>();
  pack->inTensors = {TensorOver(in, {m, k}, x), TensorOver(in, {n, k}, w)};
  pack->outTensors = {TensorOver(out, {m, n}, y)};
  return linear_bench::OpCall(op, pack);
}

#if defined(COLLOPS_BENCH_OPENBLAS)
/// OpenBLAS: widen x and w to float32 (nothing for float32), then cblas_sgemm into y32.
std::function<void()> OpenBlasMatmul(DataType in, int64_t m, int64_t k, int64_t n, void* x, void* w,
                                     float* y32) {
  auto wide = std::make_shared<std::vector<float>>(in == collops::ACL_FLOAT ? 0 : (m + n) * k);
  return [=] {
    const float* xf = static_cast<const float*>(x);
    const float* wf = static_cast<const float*>(w);
    if (in != collops::ACL_FLOAT) {
      collops::ConvertToFloat32(in, x, wide->data(), m * k);
      collops::ConvertToFloat32(in, w, wide->data() + m * k, n * k);
      xf = wide->data();
      wf = wide->data() + m * k;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, xf, k, wf, k, 0.0f, y32, n);
  };
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  omp_set_num_threads(o.threads);
#if defined(COLLOPS_BENCH_OPENBLAS)
  openblas_set_num_threads(o.threads);
  std::printf("# OpenBLAS core: %s\n", openblas_get_corename());
#endif
  std::printf("# k=%lld n=%lld, %d OpenMP thread(s); ms per call, median of %d rounds\n",
              static_cast<long long>(o.k), static_cast<long long>(o.n), o.threads, o.rounds);
  std::printf(
      "| dtype | m | onednn | onednn_out | op_f32 | op | openblas | op ÷ onednn | "
      "op_f32 ÷ onednn | openblas ÷ onednn |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  for (const auto& name : o.dtypes) {
    const DataType dtype = AclType(name);
    const size_t elem = collops::DataTypeSize(dtype);
    for (int64_t m : o.ms) {
      std::vector<uint8_t> x(m * o.k * elem), w(o.n * o.k * elem);
      for (auto& b : x) b = static_cast<uint8_t>(rng() & 0x3f);  // small finite values
      for (auto& b : w) b = static_cast<uint8_t>(rng() & 0x3f);
      std::vector<float> y32(m * o.n);
      std::vector<uint8_t> y(m * o.n * elem);
      std::map<std::string, std::function<void()>> calls = {
          {"onednn",
           DirectMatmul(dtype, collops::ACL_FLOAT, m, o.k, o.n, x.data(), w.data(), y32.data())},
          {"onednn_out", DirectMatmul(dtype, dtype, m, o.k, o.n, x.data(), w.data(), y.data())},
          {"op_f32",
           OpMatmul(dtype, collops::ACL_FLOAT, m, o.k, o.n, x.data(), w.data(), y32.data())},
          {"op", OpMatmul(dtype, dtype, m, o.k, o.n, x.data(), w.data(), y.data())}};
#if defined(COLLOPS_BENCH_OPENBLAS)
      calls["openblas"] = OpenBlasMatmul(dtype, m, o.k, o.n, x.data(), w.data(), y32.data());
#endif
      std::map<std::string, std::vector<double>> times;
      for (int round = -1; round < o.rounds; ++round) {  // round -1 warms up
        for (auto& [path, call] : calls) {
          if (!call) continue;
          const auto start = std::chrono::steady_clock::now();
          call();
          const std::chrono::duration<double, std::milli> took =
              std::chrono::steady_clock::now() - start;
          if (round >= 0) times[path].push_back(took.count());
        }
      }
      auto cell = [&](const char* path) {
        return times.count(path) ? linear_bench::Median(times[path]) : -1.0;
      };
      const double base = cell("onednn");
      std::printf("| %s | %lld | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f× | %.2f× | %.2f× |\n",
                  name.c_str(), static_cast<long long>(m), base, cell("onednn_out"), cell("op_f32"),
                  cell("op"), cell("openblas"), cell("op") / base, cell("op_f32") / base,
                  cell("openblas") / base);
    }
  }
  std::printf(
      "# -1.00: not measured (oneDNN has no kernel for that dtype on this CPU, and the "
      "op widens to f32; or built without OpenBLAS)\n");
  return 0;
}
