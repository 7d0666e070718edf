// Parses operation params with the C++ parser, for the schema-agreement test.
// stdin: a JSON array of {"op": name, "param": object-or-any}; stdout: a JSON array of
// {"status": code, "name": StatusName, "message": text}, one per row, in order.
#include <iostream>
#include <iterator>

#include "collops/collops.h"

int main() {
  using nlohmann::json;
  const std::string text((std::istreambuf_iterator<char>(std::cin)),
                         std::istreambuf_iterator<char>());
  const json rows = json::parse(text);
  json results = json::array();
  for (const auto& row : rows) {
    collops::Operation* op = nullptr;
    const collops::Status status =
        collops::CreateOperation(row.at("op").get<std::string>(), row.at("param"), &op);
    results.push_back({{"status", static_cast<int>(status)},
                       {"name", collops::StatusName(status)},
                       {"message", collops::LastErrorMessage()}});
    collops::DestroyOperation(op);
  }
  std::cout << results.dump(1) << "\n";
  return 0;
}
