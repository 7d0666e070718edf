// HCCL-style rank tables: a JSON file that says which server (host) each rank runs on.
//
//   {"version": "1.0", "server_count": "2", "status": "completed",
//    "server_list": [
//      {"server_id": "node-a", "device": [{"device_id": "0", "rank_id": "0"},
//                                         {"device_id": "1", "rank_id": "1"}]},
//      {"server_id": "node-b", "device": [{"device_id": "0", "rank_id": "2"}]}]}
//
// Numbers may be written as integers or as strings of digits (HCCL writes strings). Keys other
// than these (HCCL tables carry device_ip, host_nic_ip, container_ip, pod_name, ...) are ignored.
#pragma once

#include <string>

#include "collops/topology.h"

namespace collops {

/// Reads the rank table at `path` for a job of `rankSize` ranks. Throws Error(ERROR_INVALID_PARAM)
/// naming the file and the problem: unreadable file; malformed JSON (with the byte offset); a
/// missing or mistyped key (server_list, server_count, server_id, device, device_id, rank_id);
/// server_count != the number of servers listed; a server_id listed twice; a status other than
/// "completed" (HCCL's "table is still being written"; status may be left out); a rank_id on two
/// devices (naming both servers); a table of ranks 0..N-1 with N != rankSize; a rank_id outside
/// [0, rankSize); a rank of 0..rankSize-1 missing. A server with no devices is allowed (it hosts
/// no rank of this job).
HostLayout LoadRankTable(const std::string& path, int rankSize);

/// The same rules applied to the table's text (`path` only names it in messages).
HostLayout ParseRankTable(const std::string& text, const std::string& path, int rankSize);

}  // namespace collops
