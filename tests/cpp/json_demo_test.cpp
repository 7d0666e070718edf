// collops_json_demo's reading of its files (examples/cpp/json_demo_file.h): values stored exactly
// or refused, float16 rounded as IEEE does, nesting and dims bounded, and every bad file refused
// with exit 2 and a message naming the file and the field, before any rank runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "json_demo_file.h"

namespace collops_demo {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

/// A one-rank file of op `op` whose one input is `input`.
json OneInput(const json& input, const std::string& op = "AllReduceOperation") {
  return json{{"op", op},
              {"param", {{"commDomain", "json-demo-test"}}},
              {"ranks", json::array({json{{"inputs", json::array({input})}}})}};
}

/// The message ReadDemoRank refuses rank 0 of `spec` with ("" when it reads it).
std::string Refusal(const json& spec) {
  try {
    ReadDemoRank(spec, 0, 1);
  } catch (const DemoFileError& e) {
    return e.what();
  }
  return "";
}

/// Input 0 of rank 0 of `spec`, read.
OwnedTensor ReadInput0(const json& spec) {
  DemoRank rank = ReadDemoRank(spec, 0, 1);
  EXPECT_EQ(rank.inputs.size(), 1u);
  return std::move(rank.inputs.at(0));
}

/// The 16-bit elements of a float16 or bfloat16 tensor.
std::vector<uint16_t> Bits16(const OwnedTensor& t) {
  std::vector<uint16_t> bits(t.tensor.dataSize / 2);
  std::memcpy(bits.data(), t.bytes.data(), t.tensor.dataSize);
  return bits;
}

TEST(JsonDemoFile, Int64ValuesAreStoredAndPrintedExactly) {
  // 2^53 + 1 is the first integer a double cannot hold: through a double it printed 2^53.
  const OwnedTensor t = ReadInput0(OneInput(json::parse(R"({"dtype": "int64", "shape": [3],
                      "data": [9007199254740993, -9223372036854775808, 9223372036854775807]})")));
  EXPECT_EQ(Render(t), "[[9007199254740993, -9223372036854775808, 9223372036854775807]]");
}

TEST(JsonDemoFile, IntegersOutsideTheirDtypeAreRefusedNamingTheValue) {
  const struct {
    const char* dtype;
    const char* value;
    const char* message;
  } cases[] = {
      {"int32", "3e9", "data[0]: 3000000000.0 is outside int32's range [-2147483648, 2147483647]"},
      {"int32", "3000000000", "data[0]: 3000000000 is outside int32's range"},
      {"int32", "-2147483649", "data[0]: -2147483649 is outside int32's range"},
      {"int8", "128", "data[0]: 128 is outside int8's range [-128, 127]"},
      {"uint8", "-1", "data[0]: -1 is outside uint8's range [0, 255]"},
      {"int16", "1.5", "data[0]: 1.5 is not a whole number (int16)"},
      {"int64", "9223372036854775808", "data[0]: 9223372036854775808 is outside int64's range"},
      {"int64", "1e17", "data[0]: 1e+17 has more digits than"},
      {"float32", "true", "data[0]: true is not a number"},
      {"int32", "\"7\"", "data[0]: \"7\" is not a number"},
  };
  for (const auto& c : cases) {
    const json input = json::parse(std::string(R"({"dtype": ")") + c.dtype +
                                   R"(", "shape": [1], "data": [)" + c.value + "]}");
    EXPECT_THAT(Refusal(OneInput(input)), HasSubstr(std::string("ranks[0].inputs[0].") + c.message))
        << c.dtype << " " << c.value;
  }
  // The ends of each range fit.
  const OwnedTensor t = ReadInput0(OneInput(
      json::parse(R"({"dtype": "int32", "shape": [3], "data": [-2147483648, 2147483647, 2e3]})")));
  EXPECT_EQ(Render(t), "[[-2147483648, 2147483647, 2000]]");
}

TEST(JsonDemoFile, Float16RoundsToNearestEvenWithInfinitiesAndSubnormals) {
  const OwnedTensor t = ReadInput0(OneInput(json::parse(
      R"({"dtype": "float16", "shape": [8],
          "data": [70000, -70000, 1e-6, 65504, 65519, 65520, 5.9604644775390625e-8, 1e300]})")));
  // 0x7c00 = +inf; 1e-6 / 2^-24 = 16.78, so the subnormal 17 * 2^-24; 65504 is the largest
  // finite half, and 65520 the midpoint to the next power of two, which rounds (even) to inf.
  EXPECT_THAT(Bits16(t), ::testing::ElementsAre(0x7c00, 0xfc00, 0x0011, 0x7bff, 0x7bff, 0x7c00,
                                                0x0001, 0x7c00));
  EXPECT_THAT(Render(t), HasSubstr("[[inf, -inf, 1.01328e-06, 65504"));
  const OwnedTensor b = ReadInput0(
      OneInput(json::parse(R"({"dtype": "bfloat16", "shape": [3], "data": [1e39, -1e300, 1]})")));
  EXPECT_THAT(Bits16(b), ::testing::ElementsAre(0x7f80, 0xff80, 0x3f80));
  const OwnedTensor f = ReadInput0(
      OneInput(json::parse(R"({"dtype": "float32", "shape": [2], "data": [1e39, -1e300]})")));
  EXPECT_EQ(Render(f), "[[inf, -inf]]");
}

TEST(JsonDemoFile, AShapeOfNineDimsIsRefusedNotCut) {
  EXPECT_THAT(
      Refusal(OneInput(json::parse(R"({"dtype": "int8", "shape": [1, 1, 1, 1, 1, 1, 1, 1, 2]})"))),
      HasSubstr("ranks[0].inputs[0].shape: has 9 dims; a tensor has at most 8"));
  EXPECT_THROW(MakeTensor(collops::ACL_INT8, std::vector<int64_t>(9, 1)), std::invalid_argument);
  const OwnedTensor eight =
      ReadInput0(OneInput(json::parse(R"({"dtype": "int8", "shape": [1, 1, 1, 1, 1, 1, 1, 2]})")));
  EXPECT_EQ(eight.tensor.desc.shape.dimNum, 8u);
}

TEST(JsonDemoFile, DeepNestingIsRefusedWhileParsing) {
  // A million levels overflowed the stack of whatever recursed over the parsed value.
  const int depth = 1000000;
  const std::string text = R"({"op": "AllReduceOperation", "param": {"x": )" +
                           std::string(depth, '[') + std::string(depth, ']') +
                           R"(}, "ranks": [{"inputs": []}]})";
  try {
    ParseDemoText(text);
    ADD_FAILURE() << "accepted";
  } catch (const DemoFileError& e) {
    EXPECT_THAT(e.what(), HasSubstr("arrays and objects nest deeper than 64 levels"));
  }
  // The limit itself is allowed.
  const std::string deepest = R"({"op": "AllReduceOperation", "param": {"x": )" +
                              std::string(kMaxDemoDepth - 2, '[') +
                              std::string(kMaxDemoDepth - 2, ']') + R"(}, "ranks": [{}]})";
  EXPECT_NO_THROW(ParseDemoText(deepest));
  EXPECT_THROW(ParseDemoText("[" + deepest + "]"), DemoFileError);
}

class JsonDemoRun : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "collops_json_demo_XXXXXX";
    dir_ = mkdtemp(pattern.data()) != nullptr ? pattern : "";
    ASSERT_FALSE(dir_.empty()) << "mkdtemp failed";
  }
  void TearDown() override {
    if (!dir_.empty()) (void)system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::string Write(const std::string& text) {
    const std::string path = dir_ + "/demo" + std::to_string(files_++) + ".json";
    std::ofstream(path) << text;
    return path;
  }
  /// RunDemoFile on `path`: its exit code, with what it wrote in out_ and err_.
  int Run(const std::string& path) {
    out_.str("");
    err_.str("");
    return RunDemoFile(path, out_, err_);
  }
  std::string dir_;
  int files_ = 0;
  std::ostringstream out_, err_;
};

TEST_F(JsonDemoRun, EveryBadFileExitsTwoNamingTheFileAndTheField) {
  const std::string input = R"({"dtype": "int32", "shape": [2]})";
  const std::string ranks = R"("ranks": [{"inputs": [)" + input + "]}]";
  const struct {
    std::string text, message;
  } cases[] = {
      {"{\"op\": ", "is not JSON: parse error at line 1"},
      {"[1, 2]", "expects an object with a non-empty \"ranks\" array"},
      {"{" + ranks + "}", "op: is missing"},
      {"{\"op\": 7, " + ranks + "}", "op: 7 is not a string"},
      {"{\"op\": \"NoSuchOperation\", " + ranks + "}",
       "op: \"NoSuchOperation\" is not an operation collops knows"},
      {R"({"op": "AllReduceOperation", "param": [1], )" + ranks + "}",
       "param: [1] is not an object"},
      {R"({"op": "AllReduceOperation", "ranks": [3]})", "ranks[0]: 3 is not an object"},
      {R"({"op": "AllReduceOperation", "ranks": [{"param": 1, "inputs": []}]})",
       "ranks[0].param: 1 is not an object"},
      {R"({"op": "AllReduceOperation", "ranks": [{}]})", "ranks[0].inputs: is missing"},
      {R"({"op": "AllReduceOperation", "ranks": [{"inputs": {}}]})",
       "ranks[0].inputs: {} is not an array"},
      {R"({"op": "AllReduceOperation", "ranks": [{"inputs": [[]]}]})",
       "ranks[0].inputs[0]: [] is not an object"},
      {R"({"op": "AllReduceOperation", "ranks": [{"inputs": [{"shape": [1]}]}]})",
       "ranks[0].inputs[0].dtype: is missing"},
      {R"({"op": "AllReduceOperation", "ranks": [{"inputs": [{"dtype": "int4", "shape": [1]}]}]})",
       "ranks[0].inputs[0].dtype: \"int4\" is not one of float32, float16"},
      {R"({"op": "AllReduceOperation", "ranks": [{"inputs": [{"dtype": "int8"}]}]})",
       "ranks[0].inputs[0].shape: is missing"},
      {R"({"op": "AllReduceOperation", "ranks": [{"inputs": [{"dtype": "int8", "shape": 4}]}]})",
       "ranks[0].inputs[0].shape: 4 is not an array of dims"},
      {R"({"op": "AllReduceOperation", "ranks": [{"inputs": [{"dtype": "int8", "shape": [2, "3"]}]}]})",
       "ranks[0].inputs[0].shape[1]: \"3\" is not an integer dim"},
      {R"({"op": "AllReduceOperation", "ranks": [{"inputs": [{"dtype": "int8", "shape": [-2]}]}]})",
       "ranks[0].inputs[0].shape[0]: -2 is negative"},
      {R"({"op": "AllReduceOperation", "ranks": [{"inputs": [{"dtype": "int8", "shape": [2], "data": 5}]}]})",
       "ranks[0].inputs[0].data: 5 is not an array"},
      {R"({"op": "AllReduceOperation", "ranks": [{"inputs": [{"dtype": "int8", "shape": [2], "data": [1, 2, 3]}]}]})",
       "ranks[0].inputs[0].data: 3 values, but the shape [2] holds 2"},
      {R"({"op": "AllReduceOperation", "ranks": [{"inputs": [{"dtype": "int8", "shape": [65536, 65536]}]}]})",
       "ranks[0].inputs[0].shape: needs more than the demo's 1 GiB per tensor"},
      {R"({"op": "AllReduceOperation", "ranks": [{"inputs": []}, {"inputs": [{"dtype": "int32", "shape": [1], "data": [3e9]}]}]})",
       "ranks[1].inputs[0].data[0]: 3000000000.0 is outside int32's range"},
  };
  for (const auto& c : cases) {
    const std::string path = Write(c.text);
    EXPECT_EQ(Run(path), 2) << c.text << "\n" << err_.str();
    EXPECT_THAT(err_.str(), HasSubstr(path + ": " + c.message)) << c.text;
    EXPECT_EQ(out_.str(), "") << "a rank ran: " << c.text;
  }
  EXPECT_EQ(Run(dir_ + "/missing.json"), 2);
  EXPECT_THAT(err_.str(), HasSubstr(dir_ + "/missing.json: cannot be read"));
  EXPECT_EQ(Run(dir_), 2);  // a directory, as a FIFO or a device: never read
  EXPECT_THAT(err_.str(), HasSubstr(dir_ + ": is not a regular file"));
}

TEST_F(JsonDemoRun, AGoodFileRunsAndPrintsEveryRank) {
  const std::string path = Write(R"({"op": "AllGatherOperation",
      "param": {"commDomain": "json-demo-run"},
      "ranks": [{"inputs": [{"dtype": "int64", "shape": [1], "data": [9007199254740993]}]},
                {"inputs": [{"dtype": "int64", "shape": [1], "data": [-3]}]}]})");
  EXPECT_EQ(Run(path), 0) << out_.str() << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("rank 0 AllGatherOperation: output[0] [2, 1] "
                                    "[[9007199254740993], [-3]]"));
  EXPECT_THAT(out_.str(), HasSubstr("rank 1 AllGatherOperation: output[0] [2, 1] "
                                    "[[9007199254740993], [-3]]"));
}

}  // namespace
}  // namespace collops_demo
