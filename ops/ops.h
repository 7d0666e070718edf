// Every operation's param struct and typed CreateOperation overload.
#pragma once

#include "collops/collops.h"
#include "ops/all_gather/all_gather_param.h"
#include "ops/all_gather_v/all_gather_v_param.h"
#include "ops/all_reduce/all_reduce_param.h"
#include "ops/all_to_all/all_to_all_param.h"
#include "ops/all_to_allv/all_to_allv_param.h"
#include "ops/all_to_allvv2/all_to_allvv2_param.h"
#include "ops/barrier/barrier_param.h"
#include "ops/broadcast/broadcast_param.h"
#include "ops/linear_parallel/linear_parallel_param.h"
#include "ops/recv/recv_param.h"
#include "ops/reduce_scatter/reduce_scatter_param.h"
#include "ops/reduce_scatter_v/reduce_scatter_v_param.h"
#include "ops/send/send_param.h"
#include "ops/send_recv/send_recv_param.h"
