// The shared case rows (tests/cases/*.json) through the C++ parser, so ctest alone covers them;
// the schemas agree with the parser on the same rows
// (tests/python/schemas/test_param_schemas.py). Also: every registered op has a schema whose keys
// and defaults are its param struct's, its host-count inputs are ATB's binder keys, and a fuzz
// test of CreateOperation's JSON and text overloads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collops/operation_base.h"
#include "ops/ops.h"

namespace collops {
namespace testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const std::filesystem::path kSource = COLLOPS_SOURCE_DIR;

json ReadJsonFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

struct Row {
  std::string where;  // "params.json[12]", for failure messages
  json row;
};

std::vector<Row> LoadRows() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(kSource / "tests" / "cases")) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Row> rows;
  for (const auto& file : files) {
    const json array = ReadJsonFile(file);
    for (size_t i = 0; i < array.size(); ++i) {
      rows.push_back({Concat(file.filename().string(), "[", i, "]"), array[i]});
    }
  }
  return rows;
}

/// Schema file contents keyed by title (the op name); "common" is common.schema.json.
std::map<std::string, json> LoadSchemas() {
  std::map<std::string, json> schemas;
  for (const auto& entry : std::filesystem::directory_iterator(kSource / "json_schemas")) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 12 || name.substr(name.size() - 12) != ".schema.json") continue;
    const json schema = ReadJsonFile(entry.path());
    schemas[name == "common.schema.json" ? "common" : schema.at("title").get<std::string>()] =
        schema;
  }
  return schemas;
}

std::set<std::string> OpsInRows(const std::vector<Row>& rows) {
  std::set<std::string> ops;
  for (const auto& r : rows) ops.insert(r.row.at("op").get<std::string>());
  return ops;
}

TEST(ParamCases, EveryRegisteredOpHasASchemaAndRows) {
  const std::vector<std::string> registered = ListOperations();
  const std::set<std::string> ops(registered.begin(), registered.end());
  // One folder under ops/ per op: the registry must list as many names as there are folders.
  size_t folders = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kSource / "ops")) {
    folders += entry.is_directory() ? 1 : 0;
  }
  EXPECT_EQ(ops.size(), folders) << "ops/ folders and ListOperations() differ";
  EXPECT_EQ(registered.size(), ops.size()) << "an op is registered twice";
  std::set<std::string> titled;
  for (const auto& [title, schema] : LoadSchemas()) {
    if (title != "common") titled.insert(title);
  }
  EXPECT_EQ(titled, ops) << "json_schemas/ and ListOperations() differ";
  EXPECT_EQ(OpsInRows(LoadRows()), ops) << "tests/cases/ and ListOperations() differ";
}

// The host-count inputs each op declares (TensorSpec::IsHostCounts) are what OperationTorch's
// set_varaintpack_param binds, by name and length, so they must be ATB's binder keys: a renamed,
// moved or resized input would break ATB scripts. Every registered op is made from its first
// accepted row, so an op added later is checked without being named here; no other op has any.
TEST(ParamCases, HostCountInputsAreAtbsBinderKeys) {
  struct HostCounts {
    size_t input;
    std::string name;
    CountsLength length;
    bool operator==(const HostCounts& o) const {
      return input == o.input && name == o.name && length == o.length;
    }
  };
  constexpr CountsLength kOne = CountsLength::kOne, kPerRank = CountsLength::kPerRank;
  const std::map<std::string, std::vector<HostCounts>> expected = {
      {"AllGatherVOperation",
       {{1, "sendCount", kOne}, {2, "recvCounts", kPerRank}, {3, "rdispls", kPerRank}}},
      {"ReduceScatterVOperation",
       {{1, "sendCounts", kPerRank}, {2, "sdispls", kPerRank}, {3, "recvCount", kOne}}},
      {"AllToAllVV2Operation",
       {{1, "sendCounts", kPerRank},
        {2, "sdispls", kPerRank},
        {3, "recvCounts", kPerRank},
        {4, "rdispls", kPerRank}}},
  };
  std::set<std::string> checked;
  for (const Row& r : LoadRows()) {
    const std::string name = r.row.at("op").get<std::string>();
    if (r.row.at("status").get<int>() != NO_ERROR || !checked.insert(name).second) continue;
    SCOPED_TRACE(Concat(r.where, ": ", r.row.dump()));
    const OperationPtr op = MakeOperation(name, r.row.at("param"));
    const auto* base = dynamic_cast<const OperationBase*>(op.get());
    ASSERT_NE(base, nullptr);
    const std::vector<TensorSpec> specs = base->InputSpecs();
    std::vector<HostCounts> found;
    std::vector<std::string> shown;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!specs[i].IsHostCounts()) continue;
      found.push_back({i, specs[i].name, specs[i].countsLength});
      shown.push_back(
          Concat(i, " ", specs[i].name, specs[i].countsLength == kOne ? " (one)" : " (per rank)"));
    }
    const auto it = expected.find(name);
    EXPECT_TRUE(found == (it == expected.end() ? std::vector<HostCounts>{} : it->second))
        << "host-count inputs: " << ::testing::PrintToString(shown);
  }
  const std::vector<std::string> registered = ListOperations();
  EXPECT_EQ(checked, std::set<std::string>(registered.begin(), registered.end()));
}

// Every row, grouped by op so a failure names the op and the row.
class ParamCaseRows : public ::testing::TestWithParam<std::string> {};

TEST_P(ParamCaseRows, ParserGivesTheRowsStatus) {
  int checked = 0;
  for (const Row& r : LoadRows()) {
    if (r.row.at("op") != GetParam()) continue;
    SCOPED_TRACE(Concat(r.where, ": ", r.row.dump()));
    Operation* op = nullptr;
    const Status status = CreateOperation(GetParam(), r.row.at("param"), &op);
    OperationPtr owned(op);
    const int expected = r.row.at("status").get<int>();
    EXPECT_EQ(static_cast<int>(status), expected) << LastErrorMessage();
    if (expected == NO_ERROR) {
      EXPECT_NE(op, nullptr);
      EXPECT_EQ(LastErrorMessage(), "");
    } else {
      EXPECT_EQ(op, nullptr);
      EXPECT_THAT(LastErrorMessage(), HasSubstr(r.row.at("field").get<std::string>()));
      EXPECT_THAT(LastErrorMessage(), HasSubstr(GetParam()));
    }
    // The text overload must give the same verdict as the parsed one.
    Operation* fromText = nullptr;
    EXPECT_EQ(CreateOperation(GetParam(), r.row.at("param").dump(), &fromText), status);
    DestroyOperation(fromText);
    ++checked;
  }
  EXPECT_GE(checked, 2) << "every op needs a good and a bad row";
}

INSTANTIATE_TEST_SUITE_P(ParamCases, ParamCaseRows, ::testing::ValuesIn(ListOperations()),
                         [](const auto& info) { return info.param; });

/// The schema's declared keys and defaults for `op`: the op's own properties over the common ones.
std::map<std::string, json> SchemaDefaults(const std::map<std::string, json>& schemas,
                                           const std::string& op) {
  std::map<std::string, json> defaults;
  for (const auto& [key, prop] : schemas.at("common").at("properties").items()) {
    defaults[key] = prop.value("default", json());
  }
  const json& own = schemas.at(op);
  if (own.contains("properties")) {
    for (const auto& [key, prop] : own.at("properties").items()) {
      if (prop.contains("default") || defaults.count(key) == 0) {
        defaults[key] = prop.value("default", json());
      }
    }
  }
  return defaults;
}

template <class P>
void ExpectSchemaMatchesStruct(const std::map<std::string, json>& schemas, const std::string& op) {
  SCOPED_TRACE(op);
  ASSERT_EQ(schemas.count(op), 1u) << "no schema titled " << op;
  const json written = ParamToJson(P{});
  std::map<std::string, json> fromStruct;
  for (const auto& [key, value] : written.items()) fromStruct[key] = value;
  // The writer emits all kRsvSize reserved bytes; the schema's default [] means "all zero".
  ASSERT_EQ(fromStruct.count("rsv"), 1u);
  EXPECT_EQ(fromStruct["rsv"], json(std::vector<int>(kRsvSize, 0)));
  fromStruct["rsv"] = json::array();
  EXPECT_EQ(SchemaDefaults(schemas, op), fromStruct);
}

// Every param struct of ops/ops.h; the count keeps an added op from being left out.
TEST(ParamCases, SchemaKeysAndDefaultsAreTheStructs) {
  const auto schemas = LoadSchemas();
  size_t checked = 0;
  const auto expect = [&](auto param, const std::string& op) {
    ExpectSchemaMatchesStruct<decltype(param)>(schemas, op);
    ++checked;
  };
  expect(AllReduceParam{}, "AllReduceOperation");
  expect(AllGatherParam{}, "AllGatherOperation");
  expect(AllGatherVParam{}, "AllGatherVOperation");
  expect(ReduceScatterParam{}, "ReduceScatterOperation");
  expect(ReduceScatterVParam{}, "ReduceScatterVOperation");
  expect(BroadcastParam{}, "BroadcastOperation");
  expect(AllToAllParam{}, "AllToAllOperation");
  expect(AllToAllVParam{}, "AllToAllVOperation");
  expect(AllToAllVV2Param{}, "AllToAllVV2Operation");
  expect(SendParam{}, "SendOperation");
  expect(RecvParam{}, "RecvOperation");
  expect(SendRecvParam{}, "SendRecvOperation");
  expect(BarrierParam{}, "BarrierOperation");
  expect(LinearParallelParam{}, "LinearParallelOperation");
  EXPECT_EQ(checked, ListOperations().size()) << "a registered op's param struct is not checked";
}

// ---- fuzz ---------------------------------------------------------------------------------------

/// For failure messages; the mutations may hold invalid UTF-8, which plain dump() throws on.
std::string Shown(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// Runs one CreateOperation and checks the contract: a known Status, no escaping exception, a
/// message on failure, an operation exactly on success. Returns the status (or -1 on escape).
template <class Param>
int CheckedCreate(const std::string& opName, const Param& param, const std::string& shown) {
  Operation* op = reinterpret_cast<Operation*>(uintptr_t{1});  // must be overwritten
  Status status;
  try {
    status = CreateOperation(opName, param, &op);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "CreateOperation(" << opName << ", " << shown << ") threw: " << e.what();
    return -1;
  }
  EXPECT_STRNE(StatusName(status), "UNKNOWN_STATUS") << shown;
  if (status == NO_ERROR) {
    EXPECT_NE(op, nullptr) << shown;
    EXPECT_EQ(LastErrorMessage(), "") << shown;
    EXPECT_EQ(DestroyOperation(op), NO_ERROR);
  } else {
    EXPECT_EQ(status, ERROR_INVALID_PARAM) << shown << ": " << LastErrorMessage();
    EXPECT_EQ(op, nullptr) << shown;
    EXPECT_FALSE(LastErrorMessage().empty()) << shown;
  }
  return status;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  size_t Below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  /// A JSON value of a random type, sometimes one that sits on a parser boundary.
  json RandomValue(int depth = 0) {
    switch (Below(depth < 2 ? 14 : 12)) {
      case 0:
        return nullptr;
      case 1:
        return Below(2) == 0;
      case 2:
        return static_cast<int64_t>(Below(9)) - 2;
      case 3:
        return std::numeric_limits<int64_t>::max();
      case 4:
        return std::numeric_limits<int64_t>::min();
      case 5:
        return std::numeric_limits<uint64_t>::max();
      case 6:
        return static_cast<int64_t>(std::numeric_limits<int>::max()) + 1;
      case 7:
        return 2.0;
      case 8:
        return -0.5;
      case 9:
        return "";
      case 10:
        return std::vector<std::string>{"sum", "lccl", "2", "\xc3\xa9", "\xff"}[Below(5)];
      case 11:
        return std::string(Below(2) ? 129 : 128, 'd');
      case 12: {
        json a = json::array();
        for (size_t i = Below(4); i > 0; --i) a.push_back(RandomValue(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        for (size_t i = Below(3); i > 0; --i) o[RandomKey()] = RandomValue(depth + 1);
        return o;
      }
    }
  }

  std::string RandomKey() {
    static const std::vector<std::string> keys = {"rank",
                                                  "rankSize",
                                                  "rankRoot",
                                                  "backend",
                                                  "commMode",
                                                  "commDomain",
                                                  "rankTableFile",
                                                  "rsv",
                                                  "allReduceType",
                                                  "reduceType",
                                                  "sendCounts",
                                                  "sdispls",
                                                  "recvCounts",
                                                  "rdispls",
                                                  "recvCount",
                                                  "transpose",
                                                  "destRank",
                                                  "srcRank",
                                                  "",
                                                  "Rank",
                                                  "rank ",
                                                  "\xff"};
    return keys[Below(keys.size())];
  }

  /// Deletes, inserts or retypes keys of an object param.
  json MutateValue(json param) {
    if (!param.is_object() || Below(20) == 0) return RandomValue();
    for (size_t n = 1 + Below(3); n > 0; --n) {
      const size_t what = Below(3);
      if (what == 0 && !param.empty()) {
        auto it = param.begin();
        std::advance(it, Below(param.size()));
        param.erase(it);
      } else if (what == 1 || param.empty()) {
        param[RandomKey()] = RandomValue();
      } else {
        auto it = param.begin();
        std::advance(it, Below(param.size()));
        *it = RandomValue();
      }
    }
    return param;
  }

  /// Random byte edits of JSON text, plus number tokens the JSON grammar allows but C++ types
  /// cannot hold.
  std::string MutateText(std::string text) {
    static const std::vector<std::string> tokens = {"1e400",
                                                    "-1e400",
                                                    "1e-400",
                                                    "18446744073709551616",
                                                    "-9223372036854775809",
                                                    "0.0",
                                                    "-0",
                                                    "[",
                                                    "{",
                                                    "\"",
                                                    "\\u0000",
                                                    "\\ud800",
                                                    ",",
                                                    ":",
                                                    "null",
                                                    "\xc3",
                                                    "\xff"};
    for (size_t n = 1 + Below(4); n > 0; --n) {
      const size_t pos = text.empty() ? 0 : Below(text.size() + 1);
      switch (Below(5)) {
        case 0:
          if (!text.empty()) text[Below(text.size())] = static_cast<char>(Below(256));
          break;
        case 1:
          text.insert(pos, 1, static_cast<char>(Below(256)));
          break;
        case 2:
          if (pos < text.size()) text.erase(pos, 1 + Below(3));
          break;
        case 3:
          text.resize(pos);
          break;
        default:
          text.insert(pos, tokens[Below(tokens.size())]);
          break;
      }
    }
    return text;
  }

 private:
  std::mt19937_64 rng_;
};

TEST(ParamFuzz, RandomMutationsOfGoodRowsNeverCrash) {
  std::vector<std::pair<std::string, json>> seeds;
  for (const Row& r : LoadRows()) {
    if (r.row.at("status") == 0) seeds.emplace_back(r.row.at("op"), r.row.at("param"));
  }
  ASSERT_FALSE(seeds.empty());
  const std::vector<std::string> ops = ListOperations();
  Mutator m(20261121);
  int accepted = 0, rejected = 0, escaped = 0, afterFirstFailure = 0;
  for (int i = 0; i < 2000; ++i) {
    const auto& [seedOp, seedParam] = seeds[m.Below(seeds.size())];
    // Now and then another op's params, or a name nobody registered.
    std::string op = seedOp;
    if (m.Below(10) == 0) op = ops[m.Below(ops.size())];
    if (m.Below(50) == 0) op = seedOp + "x";
    int status;
    if (m.Below(2) == 0) {
      const json param = m.MutateValue(seedParam);
      status = CheckedCreate(op, param, Shown(param));
    } else {
      const std::string text = m.MutateText(seedParam.dump());
      status = CheckedCreate(op, text, Shown(json(text)));  // the text, quoted and escaped
    }
    (status == NO_ERROR ? accepted : status < 0 ? escaped : rejected) += 1;
    if (HasFailure() && ++afterFirstFailure > 10) break;  // enough examples, not 2000
  }
  EXPECT_EQ(escaped, 0);
  // Both outcomes must occur, or the mutations are not exercising the parser.
  EXPECT_GT(accepted, 50);
  EXPECT_GT(rejected, 500);
}

// nlohmann::json throws out_of_range (not parse_error) for a number it cannot hold as a double.
TEST(ParamFuzz, NumberOverflowInTextIsInvalidParam) {
  for (const char* text : {R"({"rankSize": 1e400})", R"({"rankSize": 1, "rsv": [-1e999]})"}) {
    Operation* op = nullptr;
    Status status = NO_ERROR;
    EXPECT_NO_THROW(status = CreateOperation("AllReduceOperation", std::string(text), &op)) << text;
    EXPECT_EQ(status, ERROR_INVALID_PARAM) << text;
    EXPECT_EQ(op, nullptr);
    EXPECT_FALSE(LastErrorMessage().empty());
  }
}

// C++ callers can hand the JSON overload strings that are not UTF-8 (text input cannot: the
// parser rejects them). A wrongly typed one must still be ERROR_INVALID_PARAM naming the field.
TEST(ParamFuzz, NonUtf8StringOfTheWrongTypeIsInvalidParam) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("AllReduceOperation", json{{"rankSize", 1}, {"rank", "\xff"}}, &op),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rank"));
  EXPECT_EQ(CreateOperation("SendOperation", json{{"rankSize", 2}, {"destRank", {"\xc3"}}}, &op),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("destRank"));
  EXPECT_EQ(op, nullptr);
}

// A deeply nested value must be rejected, not overflow the stack (in a child process, so a crash
// fails this test only).
TEST(ParamFuzz, DeeplyNestedValueIsRejectedWithoutCrashing) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  constexpr size_t kDepth = 100000;
  const std::string nested = std::string(kDepth, '[') + std::string(kDepth, ']');
  EXPECT_EXIT(
      {
        Operation* op = nullptr;
        const Status a = CreateOperation("AllReduceOperation",
                                         "{\"rankSize\": 1, \"rsv\": " + nested + "}", &op);
        const Status b =
            CreateOperation("AllReduceOperation", "{\"rankSize\": " + nested + "}", &op);
        std::exit(a == ERROR_INVALID_PARAM && b == ERROR_INVALID_PARAM ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace testing
}  // namespace collops
