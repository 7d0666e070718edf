// collops-linear-w8a8: where the time of LinearParallelOperation's W8A8 product goes, in one run.
// Per m (x int8 [m, k], weight int8 [n, k], int32 bias, per-channel scale), each round times in
// turn:
//   reorder    oneDNN's reorder of the weight into the layout its int8 matmul chose ("any":
//              blocked, with the s8 x s8 compensation): the repack
//   packed     oneDNN's int8 matmul on that repacked weight
//   stored     oneDNN's int8 matmul on the weight as stored
//   op         LinearParallelOperation PURE_LINEAR (one rank), which multiplies the weight as
//              stored every call (plus its scaling into y)
// and prints the median over rounds in ms, with the share of a call that would repack every
// time (reorder ÷ (reorder + packed)), what the stored layout costs the product (stored ÷
// packed), and a repacking call against the op ((reorder + packed) ÷ op). Threads: the OpenMP
// threads of this process (--threads, default 1: what each of 2 ranks gets on 2 CPUs).
//
//   collops-linear-w8a8                               # m 16, 256, 2048; k = n = 4096
//   collops-linear-w8a8 --ms 16 --threads 2 --rounds 9 --no-trans
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dnnl.hpp>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/linear_bench_cli.h"
#include "collops/collops.h"

namespace {

using dnnl::memory;
using linear_bench::TensorOver;

struct Options : linear_bench::CommonOptions {
  bool transWeight = true;
};

const linear_bench::Cli kCli("collops-linear-w8a8",
                             "[--ms 16,256,2048] [-k 4096] [-n 4096] [--threads 1] [--rounds 5] "
                             "[--no-trans]");

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--no-trans") {
      o.transWeight = false;
      continue;
    }
    if (i + 1 >= argc) kCli.Fail(arg + " needs a value (or is unknown)");
    if (!kCli.Common(arg, argv[++i], o)) kCli.Fail("unknown option " + arg);
  }
  return o;
}

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

/// oneDNN's int8 matmul for `weights` (a layout or "any"), as the op describes it: its "gemm:"
/// kernels skipped (quant_matmul_dnnl.cpp says why).
dnnl::matmul::primitive_desc Describe(int64_t m, int64_t k, int64_t n,
                                      const memory::desc& weights) {
  const memory::desc src({m, k}, memory::data_type::s8, {k, 1});
  const memory::desc bias({1, n}, memory::data_type::s32, {n, 1});
  const memory::desc dst({m, n}, memory::data_type::s32, {n, 1});
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, bias, dst), Engine());
  const dnnl::matmul::primitive_desc first = pd;
  while (std::string(pd.impl_info_str()).rfind("gemm:", 0) == 0) {
    if (!pd.next_impl()) return first;
  }
  return pd;
}

/// The buffers of one m and the calls that time them.
struct Case {
  std::vector<int8_t> x, w;
  std::vector<int32_t> bias, sums;
  std::vector<float> scale;
  std::vector<uint16_t> y;  // bfloat16
  std::unique_ptr<memory> stored, packed, src, biasMem, dst;
  std::map<std::string, std::function<void()>> calls;
};

/// LinearParallelOperation PURE_LINEAR W8A8 (quantType 1, y bfloat16) on one thread rank.
std::function<void()> OpCall(Case& c, int64_t m, const Options& o) {
  auto op = std::make_shared<collops::OperationPtr>(collops::MakeOperation(
      "LinearParallelOperation", {{"rank", 0},
                                  {"rankSize", 1},
                                  {"commMode", 1},
                                  {"commDomain", "linear-w8a8"},
                                  {"type", 3},
                                  {"transWeight", o.transWeight},
                                  {"quantType", 1},
                                  {"outDataType", static_cast<int>(collops::ACL_BF16)}}));
  auto pack = std::make_shared<collops::VariantPack>();
  const std::vector<int64_t> wShape =
      o.transWeight ? std::vector<int64_t>{o.n, o.k} : std::vector<int64_t>{o.k, o.n};
  pack->inTensors = {TensorOver(collops::ACL_INT8, {m, o.k}, c.x.data()),
                     TensorOver(collops::ACL_INT8, wShape, c.w.data()),
                     TensorOver(collops::ACL_INT32, {o.n}, c.bias.data()),
                     TensorOver(collops::ACL_FLOAT, {o.n}, c.scale.data())};
  pack->outTensors = {TensorOver(collops::ACL_BF16, {m, o.n}, c.y.data())};
  return linear_bench::OpCall(op, pack);
}

void Build(Case& c, int64_t m, const Options& o, std::mt19937& rng) {
  const int64_t k = o.k, n = o.n;
  c.x.resize(m * k);
  c.w.resize(k * n);
  for (auto& v : c.x) v = static_cast<int8_t>(rng());
  for (auto& v : c.w) v = static_cast<int8_t>(rng());
  c.bias.assign(n, 3);
  c.scale.assign(n, 1e-4f);
  c.sums.resize(m * n);
  c.y.resize(m * n);
  const memory::desc storedDesc = o.transWeight
                                      ? memory::desc({k, n}, memory::data_type::s8, {1, k})
                                      : memory::desc({k, n}, memory::data_type::s8, {n, 1});
  const auto packedPd =
      Describe(m, k, n, memory::desc({k, n}, memory::data_type::s8, memory::format_tag::any));
  const auto storedPd = Describe(m, k, n, storedDesc);
  c.stored = std::make_unique<memory>(storedDesc, Engine(), c.w.data());
  c.packed = std::make_unique<memory>(packedPd.weights_desc(), Engine());
  c.src = std::make_unique<memory>(packedPd.src_desc(), Engine(), c.x.data());
  c.biasMem = std::make_unique<memory>(memory::desc({1, n}, memory::data_type::s32, {n, 1}),
                                       Engine(), c.bias.data());
  c.dst = std::make_unique<memory>(packedPd.dst_desc(), Engine(), c.sums.data());
  auto reorder = std::make_shared<dnnl::reorder>(*c.stored, *c.packed);
  auto packedMatmul = std::make_shared<dnnl::matmul>(packedPd);
  auto storedMatmul = std::make_shared<dnnl::matmul>(storedPd);
  auto run = [](const std::function<void(dnnl::stream&)>& body) {
    dnnl::stream s(Engine());
    body(s);
    s.wait();
  };
  Case* cp = &c;
  c.calls["reorder"] = [=] {
    run([&](dnnl::stream& s) { reorder->execute(s, *cp->stored, *cp->packed); });
  };
  auto matmulOn = [=](std::shared_ptr<dnnl::matmul> prim, memory* weights) {
    return [=] {
      run([&](dnnl::stream& s) {
        prim->execute(s, {{DNNL_ARG_SRC, *cp->src},
                          {DNNL_ARG_WEIGHTS, *weights},
                          {DNNL_ARG_BIAS, *cp->biasMem},
                          {DNNL_ARG_DST, *cp->dst}});
      });
    };
  };
  c.calls["packed"] = matmulOn(packedMatmul, c.packed.get());
  c.calls["stored"] = matmulOn(storedMatmul, c.stored.get());
  c.calls["op"] = OpCall(c, m, o);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  omp_set_num_threads(o.threads);
  std::printf(
      "# W8A8 k=%lld n=%lld transWeight %s, %d OpenMP thread(s); ms per call, median of %d "
      "rounds\n",
      static_cast<long long>(o.k), static_cast<long long>(o.n), o.transWeight ? "true" : "false",
      o.threads, o.rounds);
  std::printf(
      "| m | reorder | packed | stored | op | reorder ÷ (reorder + packed) | stored ÷ packed | "
      "(reorder + packed) ÷ op |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  const char* paths[] = {"reorder", "packed", "stored", "op"};
  for (int64_t m : o.ms) {
    Case c;
    Build(c, m, o, rng);
    std::map<std::string, std::vector<double>> times;
    for (int round = -1; round < o.rounds; ++round) {  // round -1 warms up
      for (const char* path : paths) {
        const auto start = std::chrono::steady_clock::now();
        c.calls[path]();
        const std::chrono::duration<double, std::milli> took =
            std::chrono::steady_clock::now() - start;
        if (round >= 0) times[path].push_back(took.count());
      }
    }
    std::map<std::string, double> t;
    for (const char* path : paths) t[path] = linear_bench::Median(times[path]);
    std::printf("| %lld | %.2f | %.2f | %.2f | %.2f | %.0f%% | %.2f× | %.2f× |\n",
                static_cast<long long>(m), t["reorder"], t["packed"], t["stored"], t["op"],
                100 * t["reorder"] / (t["reorder"] + t["packed"]), t["stored"] / t["packed"],
                (t["reorder"] + t["packed"]) / t["op"]);
  }
  return 0;
}
