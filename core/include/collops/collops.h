// Umbrella header: the core API of collops. Op param structs are in "ops/ops.h" (in the source
// tree; an installed collops has it as <collops/ops/ops.h>).
#pragma once

#include "collops/backend.h"
#include "collops/comm_params.h"
#include "collops/communicator.h"
#include "collops/context.h"
#include "collops/operation.h"
#include "collops/reduce.h"
#include "collops/registry.h"
#include "collops/status.h"
#include "collops/tensor.h"
#include "collops/version.h"
