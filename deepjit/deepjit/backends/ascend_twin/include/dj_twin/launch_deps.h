// dj_twin/launch_deps.h — what dj_twin/launch.h includes, apart so that the twin's precompiled prelude can
// hold it: launch.h itself is compiled two ways (launch.o defines launch(), the launchers only declare it),
// and each kernel's launcher parsed these headers again (0.15 s of a 1.3 s build).
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "c_api/sync.h"
#include "dj_twin/l2_model.h"
#include "dj_twin/runtime.h"
#include "dj_twin/symm.h"
