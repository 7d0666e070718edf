// What the benchmarks of LinearParallelOperation's product (collops-linear-blas,
// collops-linear-w8a8) share: the options both take, their parsing and refusals, the collops
// tensor over a buffer, a timed call of the op, and the median of a path's rounds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collops/collops.h"

namespace linear_bench {

struct CommonOptions {
  std::vector<int64_t> ms = {16, 256, 2048};
  int64_t k = 4096;
  int64_t n = 4096;
  int threads = 1;  ///< OpenMP threads: 1 is what each of 2 ranks gets on 2 CPUs
  int rounds = 5;
};

class Cli {
 public:
  /// `usage`: the options after the program's name, for the message of a refusal.
  Cli(const char* program, const char* usage) : program_(program), usage_(usage) {}

  /// "<program>: <why>" and the usage on stderr, exit status 2.
  [[noreturn]] void Fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s\nusage: %s %s\n", program_, why.c_str(), program_, usage_);
    std::exit(2);
  }

  int64_t Positive(const std::string& option, const std::string& text) const {
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || v < 1) Fail(option + " needs a positive integer: " + text);
    return v;
  }

  /// "a,b,c" -> {"a", "b", "c"}.
  static std::vector<std::string> Split(const std::string& text) {
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

  /// Reads `arg value` into `o` when it is a common option (--ms, -k, -n, --threads, --rounds);
  /// false for any other.
  bool Common(const std::string& arg, const std::string& value, CommonOptions& o) const {
    if (arg == "--ms") {
      o.ms.clear();
      for (const auto& m : Split(value)) o.ms.push_back(Positive(arg, m));
    } else if (arg == "-k") {
      o.k = Positive(arg, value);
    } else if (arg == "-n") {
      o.n = Positive(arg, value);
    } else if (arg == "--threads") {
      o.threads = static_cast<int>(Positive(arg, value));
    } else if (arg == "--rounds") {
      o.rounds = static_cast<int>(Positive(arg, value));
    } else {
      return false;
    }
    return true;
  }

 private:
  const char* program_;
  const char* usage_;
};

/// A collops tensor of `dtype` and `shape` over `data`.
inline collops::Tensor TensorOver(collops::DataType dtype, const std::vector<int64_t>& shape,
                                  void* data) {
  collops::Tensor t;
  t.desc.dtype = dtype;
  t.desc.shape = collops::MakeDims(shape);
  t.deviceData = data;
  t.dataSize = collops::TensorBytes(t.desc);
  return t;
}

/// One call of `op` on `pack`: Setup, a workspace of its own, Execute; exits with the error on a
/// failure.
inline std::function<void()> OpCall(std::shared_ptr<collops::OperationPtr> op,
                                    std::shared_ptr<collops::VariantPack> pack) {
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

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace linear_bench
