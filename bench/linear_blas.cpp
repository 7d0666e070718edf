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

#include "collops/collops.h"
#include "collops/reduce.h"
#if defined(COLLOPS_BENCH_OPENBLAS)
#include <cblas.h>
#endif

namespace {

using collops::DataType;

struct Options {
  std::vector<std::string> dtypes = {"bf16", "f32"};
  std::vector<int64_t> ms = {16, 256, 2048};
  int64_t k = 4096;
  int64_t n = 4096;
  int threads = 1;
  int rounds = 5;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "collops-linear-blas: %s\nusage: collops-linear-blas [--dtypes bf16,f16,f32] "
               "[--ms 16,256,2048] [-k 4096] [-n 4096] [--threads 1] [--rounds 5]\n",
               why.c_str());
  std::exit(2);
}

int64_t Positive(const std::string& option, const std::string& text) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 1) Usage(option + " needs a positive integer: " + text);
  return v;
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    parts.push_back(
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) Usage(arg + " needs a value (or is unknown)");
    const std::string value = argv[++i];
    if (arg == "--dtypes") {
      o.dtypes = Split(value);
      for (const auto& d : o.dtypes) {
        if (d != "bf16" && d != "f16" && d != "f32") Usage("unknown dtype " + d);
      }
    } else if (arg == "--ms") {
      o.ms.clear();
      for (const auto& m : Split(value)) o.ms.push_back(Positive("--ms", m));
    } else if (arg == "-k") {
      o.k = Positive(arg, value);
    } else if (arg == "-n") {
      o.n = Positive(arg, value);
    } else if (arg == "--threads") {
      o.threads = static_cast<int>(Positive(arg, value));
    } else if (arg == "--rounds") {
      o.rounds = static_cast<int>(Positive(arg, value));
    } else {
      Usage("unknown option " + arg);
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
  auto tensor = [](DataType d, std::vector<int64_t> shape, void* data) {
    collops::Tensor t;
    t.desc.dtype = d;
    t.desc.shape = collops::MakeDims(shape);
    t.deviceData = data;
    t.dataSize = collops::TensorBytes(t.desc);
    return t;
  };
  auto pack = std::make_shared<collops::VariantPack>();
  pack->inTensors = {tensor(in, {m, k}, x), tensor(in, {n, k}, w)};
  pack->outTensors = {tensor(out, {m, n}, y)};
  auto workspace = std::make_shared<std::vector<uint8_t>>();
  return [op, pack, workspace] {
    uint64_t size = 0;
    if ((*op)->Setup(*pack, size, nullptr) != collops::NO_ERROR) {
      std::fprintf(stderr, "Setup: %s\n", collops::LastErrorMessage().c_str());
      std::exit(1);
    }
    if (workspace->size() < size) workspace->resize(size);
    if ((*op)->Execute(*pack, workspace->data(), size, nullptr) != collops::NO_ERROR) {
      std::fprintf(stderr, "Execute: %s\n", collops::LastErrorMessage().c_str());
      std::exit(1);
    }
  };
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

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

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
      auto cell = [&](const char* path) { return times.count(path) ? Median(times[path]) : -1.0; };
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
