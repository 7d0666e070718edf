// Every operation's param struct and typed CreateOperation overload: the public half of ops/ (the
// rest of each op's folder is private). Installed as <collops/ops/ops.h> beside the param headers,
// which it includes relative to itself so that both layouts resolve.
#pragma once

#include "all_gather/all_gather_param.h"
#include "all_gather_v/all_gather_v_param.h"
#include "all_reduce/all_reduce_param.h"
#include "all_to_all/all_to_all_param.h"
#include "all_to_allv/all_to_allv_param.h"
#include "all_to_allvv2/all_to_allvv2_param.h"
#include "barrier/barrier_param.h"
#include "broadcast/broadcast_param.h"
#include "collops/collops.h"
#include "linear_parallel/linear_parallel_param.h"
#include "recv/recv_param.h"
#include "reduce_scatter/reduce_scatter_param.h"
#include "reduce_scatter_v/reduce_scatter_v_param.h"
#include "send/send_param.h"
#include "send_recv/send_recv_param.h"
